"""The GPU check's pipeline inside vLLM (``experiments/gpu_check.py --vllm-only``,
``experiments/gpu_check_parts/vllm_stages.py``) at its smoke budget, on vLLM's CPU build: vLLM's
prices recorded over every action at 1 and 4 rows and fitted, the share scenarios copied to name
them and their traces recorded in vLLM, a policy trained on them, and the vLLM bench with it. What
a GPU run does, end to end, with every budget shrunk (its numbers mean nothing).

Runs in the vLLM environment (``tests/conftest.py`` leaves this folder out elsewhere).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
STAGES = ["vllm-environment", "vllm-prices", "vllm-fit", "vllm-collect", "vllm-train", "vllm-bench"]


@pytest.mark.slow
def test_the_smoke_pipeline_records_fits_collects_trains_and_benches_inside_vllm(tmp_path):
    out, home = tmp_path / "out", tmp_path / "home"
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "experiments" / "gpu_check.py"),
            "--smoke",
            "--vllm-only",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=dict(os.environ, SPECRL_HOME=str(home)),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    stages = json.loads((out / "gpu_check.json").read_text())["stages"]
    assert list(stages) == ["environment", *STAGES]
    assert all(stage["status"] == "ok" for stage in stages.values())

    assert stages["vllm-prices"]["result"]["steps"] > 0
    prices = json.loads(Path(stages["vllm-fit"]["result"]["prices"]).read_text())
    assert prices["kind"] == "serving" and prices["device"] == "vllm-cpu"
    copies = [Path(p) for p in stages["vllm-collect"]["result"]["scenarios"]]
    assert [p.stem for p in copies] == ["vllm_share_1", "vllm_share_4"]
    for copy in copies:  # each names this run's prices, and the smoke budget's requests
        scenario = yaml.safe_load(copy.read_text())
        assert scenario["latency"] == str((out / "vllm" / "prices.json").resolve())
        assert scenario["max_new_tokens"] == 16 and scenario["recorded_by"] == "vllm"
    assert any((home / "traces").rglob("*.vllm")), "the copies' traces were recorded in vLLM"
    policy = Path(stages["vllm-train"]["result"]["folder"])
    metadata = json.loads((policy / "metadata.json").read_text())
    assert metadata["latency_profiles"]["prices"]["kind"] == "serving"  # it carries the device's prices
    bench = json.loads((out / "vllm" / "bench" / "bench.json").read_text())
    assert f"specrl {policy}" in bench["rows"] and bench["settings"]["fixed_batches"] == [1, 4]
    ratios = stages["vllm-bench"]["result"]["policy_vs_no_speculation"]
    assert set(ratios) == {"arrivals", "B=1", "B=4", "chat"} and all(r > 0 for r in ratios.values())
    assert "| vllm-bench | ok |" in (out / "gpu_check.md").read_text()
