"""The GPU check's stages that run in a child process (``specrl train``, ``specrl evaluate``, and
the decoding benchmark, ``experiments/bench_decode.py``), their output shown and kept under
``<out>/logs``, and read back what they wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import torch

EXPERIMENTS = Path(__file__).resolve().parents[1]  # the folder of the scripts


def run_script(script: str, arguments: list[str], log: Path, device: str) -> None:
    """``specrl <script> ARGUMENTS`` (a subcommand), or ``python experiments/<script> ARGUMENTS`` (a
    ``.py`` script beside ``gpu_check.py``), its output shown and kept in ``log``; raises on failure. On
    the CPU it sees no GPU (CUDA_VISIBLE_DEVICES empty), so that everything runs where the check does."""
    if script.endswith(".py"):
        command = [sys.executable, str(EXPERIMENTS / script), *arguments]
    else:
        command = [sys.executable, "-m", "specrl", script, *arguments]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if torch.get_num_threads() == 1:  # the scripts too (the latency file's name has the count)
        env["OMP_NUM_THREADS"] = "1"
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    print("$ " + " ".join(command[1:]), flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        process = subprocess.Popen(
            command,
            cwd=EXPERIMENTS.parent,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            handle.write(line)
        code = process.wait()
    if code != 0:
        raise RuntimeError(f"{script} exited with {code}; its output is in {log}")


def quick_policy(budget: dict[str, Any], scenarios: list[str], out: Path) -> dict[str, Any]:
    """PPO on the pair's train traces, a small budget; the policy exported to <out>/policy/quick."""
    folder = out / "policy" / "quick"
    # no real-loop validation (the benchmark stage does that), no extra scenarios in its comparison,
    # checkpoints selected on the training scenarios' own validation traces
    run_script(
        "train",
        ["--preset", budget["preset"], "--scenarios", *scenarios, "--select-scenarios", "--eval-scenarios",
         "--validate-scenarios",
         "--total-timesteps", str(budget["ppo_timesteps"]), "--n-envs", str(budget["n_envs"]),
         "--eval-freq", str(budget["eval_freq"]), "--export-as", str(folder),
         "--runs-dir", str(out / "runs"), "--exp-name", "gpu-check"],
        out / "logs" / "train_ppo.log",
        budget["device"],
    )  # fmt: skip
    evaluation = json.loads((folder / "metadata.json").read_text()).get("evaluation", {})
    return {
        "folder": str(folder),
        "timesteps": evaluation.get("training_steps"),
        "ratio_vs_tcp_sim_validation": evaluation.get("ratio_vs_tcp_sim_validation"),
        "ratio_vs_tcp_sim_test": evaluation.get("ratio_vs_tcp_sim_test"),
    }


def benchmark(budget: dict[str, Any], scenarios: list[str], out: Path, smoke: bool) -> dict[str, Any]:
    """``specrl evaluate`` on the test prompts: every controller, the real loop and the simulator."""
    folder = out / "evaluate"
    arguments = ["--preset", budget["preset"], "--device", budget["device"], "--scenarios", *scenarios,
                 "--policy", str(out / "policy" / "quick"), "--episodes", str(budget["episodes"]),
                 "--repeats", str(budget["repeats"]), "--out", str(folder)]  # fmt: skip
    if budget["latency"]:
        arguments += ["--latency", budget["latency"]]
    if smoke:
        arguments += ["--no-progress"]
    run_script("evaluate", arguments, out / "logs" / "evaluate.log", budget["device"])
    results = json.loads((folder / "results.json").read_text())
    return {"folder": str(folder), "latency": results.get("latency"), "headline": headline(results)}


def bench_compile(budget: dict[str, Any], out: Path) -> dict[str, Any]:
    """bench_decode.py with the static KV cache and compiled decode forwards, against HF generate."""
    folder = out / "bench_decode_static_compiled"
    run_script(
        "bench_decode.py",
        ["--preset", budget["preset"], "--device", budget["device"], "--kv-cache", "static", "--compile",
         "--domains", "code", "--prompts-per-domain", "2", "--k-values", "2", "4", "--temperatures", "0",
         "--repeats", str(budget["repeats"]), "--no-hf-defaults", "--out", str(folder)],
        out / "logs" / "bench_decode.log",
        budget["device"],
    )  # fmt: skip
    return {"folder": str(folder), "files": sorted(p.name for p in folder.iterdir())}


def headline(results: dict) -> dict[str, list[dict]]:
    """Per scenario, each controller's real-loop tokens/s, speed-up over plain, ratio to TCP and
    acceptance, and its simulator tokens/s, from ``specrl evaluate``'s results.json."""
    table = {}
    for name, scenario in results.get("scenarios", {}).items():
        rows = []
        for key, row in scenario.get("rows", {}).items():
            real, sim = row.get("real") or {}, row.get("sim") or {}
            rows.append(
                {
                    "controller": key,
                    "label": row.get("label", key),
                    "real_tokens_per_s": real.get("tokens_per_s"),
                    "speedup": real.get("speedup"),
                    "ratio_to_tcp": real.get("ratio_to_tcp"),
                    "acceptance_rate": real.get("acceptance_rate"),
                    "sim_tokens_per_s": sim.get("tokens_per_s"),
                }
            )
        table[name] = rows
    return table
