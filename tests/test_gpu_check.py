"""experiments/gpu_check.py (its parts: experiments/gpu_check_parts/) and what it needs from the
package: the "gpu" embedded-pair preset and a build's wall-clock cap.

No GPU is available to this project: the script runs here with --smoke (every budget shrunk, the
tiny pair on the CPU), which goes through every stage a GPU run goes through. The script is run,
never imported: the tests read the files it writes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specrl.embedded.__main__ import main as zoo_main
from specrl.embedded.presets import PRESETS, parameters, training_flops
from specrl.embedded.train import make_model

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "experiments" / "gpu_check.py"
STAGES = ["environment", "lossless", "build", "calibrate", "policy", "benchmark"]


class Vocabulary:
    """What make_model reads from a tokenizer."""

    bos_token_id = eos_token_id = pad_token_id = 0

    def __len__(self) -> int:
        return 4096


def test_the_gpu_preset_is_a_few_hundred_million_parameters_with_its_draft_and_its_estimate_fits():
    preset = PRESETS["gpu"]
    with torch.device("meta"):  # shapes only: nothing is allocated
        target = make_model(preset.target, preset, Vocabulary(), 0)
        draft = make_model(preset.draft, preset, Vocabulary(), 1)
    assert 250e6 < target.num_parameters() < 400e6 and draft.num_parameters() < target.num_parameters() / 20
    assert abs(parameters(preset.target, preset.vocab_size) / target.num_parameters() - 1) < 1e-3
    assert preset.mix_draft[2] == 0  # math stays out of the draft's domain, as in every preset
    # the presets.py comment's arithmetic: the planned steps at an assumed 200 TFLOP/s fit the 3 minutes
    seconds = (
        preset.target_steps * training_flops(preset, preset.target)
        + preset.draft_steps * training_flops(preset, preset.draft, preset.target)
    ) / 200e12
    assert 100 < seconds < 150


def test_a_capped_build_stops_early_and_its_card_records_the_steps_and_the_cap(tmp_path, capsys):
    zoo_main(["build", "--preset", "tiny", "--out", str(tmp_path / "pair"), "--max-seconds", "0"])
    card = json.loads((tmp_path / "pair" / "card.json").read_text())
    assert card["budget"] == {
        "max_seconds": 0.0,
        "hit": True,
        "steps": {"target": 1, "draft": 1, "draft-mid": 1},  # a passed deadline stops after one step
        "planned_steps": {"target": 150, "draft": 100, "draft-mid": 100},
    }
    assert card["draft-mid"]["steps"] == 1 and "--max-seconds 0" in card["command"]
    assert "gpu" not in card["built_with"]  # trained on the CPU: no GPU name to record
    assert (tmp_path / "pair" / "target" / "model.safetensors").is_file()
    assert json.loads(capsys.readouterr().out)["budget"]["hit"] is True


def run_check(*flags: str, home: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ) if home is None else dict(os.environ, SPECRL_HOME=str(home))
    return subprocess.run(
        [sys.executable, str(SCRIPT), *flags],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,  # the smoke run: about a minute on 2 quiet CPU cores
    )


@pytest.mark.slow
def test_a_failed_stage_is_recorded_and_the_stages_that_need_it_are_skipped(tmp_path, tiny_home):
    home, _ = tiny_home  # the tiny pair is built there: the build stage reuses it
    out = tmp_path / "out"
    run = run_check(
        "--smoke", "--scenarios", "no_such_scenario", "--samples", "20", "--out", str(out), home=home
    )
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    stages = report["stages"]
    assert list(stages) == STAGES and report["passed"] is False and report["smoke"] is True
    assert stages["environment"]["status"] == "ok" and stages["build"]["result"]["reused"] is True
    assert stages["calibrate"]["status"] == "failed"
    assert stages["calibrate"]["error"].startswith(
        "ScenarioError: scenario file 'no_such_scenario' not found"
    )
    for skipped in ("policy", "benchmark"):
        assert stages[skipped] == {"status": "skipped", "seconds": 0.0, "reason": "needs calibrate"}
    markdown = (out / "gpu_check.md").read_text()
    assert "NOT every stage passed" in markdown and "no_such_scenario" in markdown
    assert "| policy | skipped | 0.0 | needs calibrate |" in markdown
    assert "NOT every stage passed: see gpu_check.md" in run.stdout


def test_a_count_below_one_is_refused_by_name_before_anything_is_written(tmp_path):
    for flags, message in (
        (["--smoke", "--repeats", "0"], "--episodes and --repeats must be >= 1"),
        (["--ppo-timesteps", "0"], "--samples, --calibration-steps and --ppo-timesteps must be positive"),
        (["--smoke", "--train-seconds", "-1"], "--train-seconds > 0"),
    ):
        run = run_check(*flags, "--out", str(tmp_path / "out"))
        assert run.returncode == 2 and message in run.stderr, run.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal a machine without CUDA gives")
def test_a_gpu_run_where_torch_sees_no_gpu_is_refused_by_name(tmp_path):
    run = run_check("--out", str(tmp_path / "out"))  # refused before it writes
    assert run.returncode != 0
    assert "gpu_check: " in run.stderr and "sees no CUDA device here; install a CUDA build" in run.stderr
    assert not (tmp_path / "out").exists()


VLLM_STAGES = ["vllm-environment", "vllm-prices", "vllm-fit", "vllm-collect", "vllm-train", "vllm-bench"]


def test_the_pipeline_inside_vllm_without_vllm_says_how_to_install_it_and_skips_the_rest(tmp_path):
    """The vLLM stages (gpu_check_parts/vllm_stages.py) run in the vLLM environment: where vLLM is
    missing, the first fails naming the install and the others are skipped. (The whole pipeline,
    smoke budget, runs in the vLLM environment: tests/in_vllm/test_vllm_pipeline.py.)"""
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here: tests/in_vllm runs the pipeline")
    out = tmp_path / "out"
    run = run_check("--smoke", "--vllm-only", "--out", str(out))
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    stages = json.loads((out / "gpu_check.json").read_text())["stages"]
    assert list(stages) == ["environment", *VLLM_STAGES] and stages["environment"]["status"] == "ok"
    assert (
        stages["vllm-environment"]["status"] == "failed"
        and "pip install" in stages["vllm-environment"]["error"]
    )
    for name, needed in zip(VLLM_STAGES[1:], VLLM_STAGES, strict=False):
        assert stages[name] == {"status": "skipped", "seconds": 0.0, "reason": f"needs {needed}"}
    assert "| vllm-train | skipped | 0.0 | needs vllm-collect |" in (out / "gpu_check.md").read_text()


@pytest.mark.slow
def test_the_smoke_run_goes_through_every_stage_and_writes_its_report(tmp_path, tiny_home):
    out = tmp_path / "out"
    run = run_check("--smoke", "--out", str(out), home=tmp_path / "home")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((out / "gpu_check.json").read_text())
    stages = report["stages"]
    assert list(stages) == STAGES and report["passed"] is True and report["smoke"] is True
    assert all(stage["status"] == "ok" and stage["seconds"] >= 0 for stage in stages.values())

    checks = stages["lossless"]["result"]["checks"]
    assert checks["greedy_float32"]["passed"] and checks["greedy_float32"]["accepts_and_rejects"]
    assert checks["sampling_float32"]["passed"] and checks["sampling_float32"]["samples"] == 300
    assert checks["greedy_bfloat16"]["passed"] is None  # information

    build = stages["build"]["result"]
    assert build["reused"] is False and build["dir"] == str(tmp_path / "home" / "embedded" / "tiny-seed0")
    assert build["budget"]["hit"] is False and build["budget"]["steps"] == build["budget"]["planned_steps"]
    home, _ = tiny_home  # a cap that is not hit changes nothing: the weights of an uncapped build
    for model in ("target", "draft", "draft-mid"):
        built = tmp_path / "home" / "embedded" / "tiny-seed0" / model / "model.safetensors"
        shipped = home / "embedded" / "tiny-seed0" / model / "model.safetensors"
        assert built.read_bytes() == shipped.read_bytes()

    calibration = stages["calibrate"]["result"]
    assert Path(calibration["file"]).is_file() and calibration["plain_tokens_per_s"] > 0
    policy = stages["policy"]["result"]
    assert policy["timesteps"] == 2048 and (Path(policy["folder"]) / "policy.pt2").is_file()

    rows = {row["controller"]: row for row in stages["benchmark"]["result"]["headline"]["code"]}
    expected = {"plain", "static:2:0", "static:4:0", "best-static", "tcp", "hf-heuristic"}
    expected |= {"hf-generate", "hf-generate-assisted", "learned:quick"}
    assert expected <= set(rows)
    assert all(rows[name]["real_tokens_per_s"] > 0 for name in expected)
    assert rows["plain"]["speedup"] == 1.0 and rows["tcp"]["ratio_to_tcp"] == 1.0
    assert (out / "evaluate" / "results.json").is_file()

    markdown = (out / "gpu_check.md").read_text()
    assert markdown.startswith("# GPU check (smoke run")
    assert all(f"| {stage} | ok |" in markdown for stage in STAGES)
    assert "## code: tokens/s on the test prompts" in markdown and "learned policy" in markdown
