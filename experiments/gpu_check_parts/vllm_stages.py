"""The GPU check's vLLM pipeline (``--vllm``): what a vLLM user does to get a policy trained where
it serves, on the device, with the embedded pair. Each stage is one of the repo's commands in a
child process (:func:`~gpu_check_parts.script_stages.run_script`), in the environment that has
vLLM (its CUDA build on a GPU, its CPU build for ``--smoke``):

1. vllm-prices   ``experiments/vllm_prices.py`` with the exploring controller
                 (``specrl.vllm.explore:Explore``: k and the drafter at random) at each batch size
                 of the budget: vLLM's recorded steps over every action;
2. vllm-fit      ``specrl calibrate --method serving`` over those steps: vLLM's prices on the device,
                 with the fit's held-out error;
3. vllm-collect  the ``vllm_share_B`` scenarios copied to name those prices, and ``specrl collect
                 --engine vllm`` on them: the requests' traces recorded inside vLLM (traces the
                 package ships or the cache holds for the same scenario are read, not recorded:
                 greedy traces are the pair's, whatever the device);
4. vllm-train    ``specrl train`` on the copies, priced by the device's vLLM prices, selected on
                 validation, exported to ``<out>/vllm/policy``;
5. vllm-bench    ``experiments/bench_vllm.py`` with that policy: vLLM's own settings tuned on
                 validation against specrl's proposer, interleaved repeats.

A stage whose output is already there is not run again (``vllm-prices`` per batch size), so an
interrupted run resumes by running the check again with the same ``--out``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gpu_check_parts.script_stages import run_script
from specrl.envs.scenario.loading import scenario_path
from specrl.io import write_text_atomic

EXPLORE = "specrl.vllm.explore:Explore"
SHARE = "vllm_share_{rows}"  # the shipped scenario of one request's share of a batch of ``rows``


def environment() -> dict[str, Any]:
    """vLLM's version (refused with the install line where it is missing or not the supported one)."""
    from specrl.vllm.compat import require_vllm

    vllm = require_vllm()
    return {"vllm": vllm.__version__, "summary": f"vLLM {vllm.__version__}"}


def prices(budget: dict[str, Any], out: Path) -> dict[str, Any]:
    """vLLM's steps under the exploring controller at each batch size (``vllm_batches``)."""
    folder = out / "vllm" / "prices"
    for rows in budget["vllm_batches"]:
        if steps_file(folder, rows).is_file():
            continue  # recorded by an earlier run of the check
        run_script(
            "vllm_prices.py",
            ["--controller", EXPLORE, "--runs", "draft", "--max-num-seqs", str(rows),
             "--prompts-per-domain", str(budget["vllm_prompts"]),
             "--max-new-tokens", str(budget["vllm_tokens"]), "--out", str(folder / f"b{rows}")],
            out / "logs" / f"vllm_prices_b{rows}.log",
            budget["device"],
        )  # fmt: skip
    files = [steps_file(folder, rows) for rows in budget["vllm_batches"]]
    steps = sum(len(path.read_text().splitlines()) for path in files)
    return {"steps_files": [str(p) for p in files], "steps": steps, "summary": f"{steps} recorded steps"}


def steps_file(folder: Path, rows: int) -> Path:
    """Where ``vllm_prices.py --out FOLDER/bROWS --runs draft`` keeps its steps."""
    return folder / f"b{rows}_draft_steps.jsonl"


def fit(budget: dict[str, Any], out: Path, recorded: dict[str, Any]) -> dict[str, Any]:
    """vLLM's prices on this device, fitted over every recorded step, and their held-out error."""
    path = out / "vllm" / "prices.json"
    name = f"vllm-{budget['device']}"
    run_script(
        "calibrate",
        ["--method", "serving", "--from-steps", *recorded["steps_files"], "--serving-name", name,
         "--out", str(path), "--force"],
        out / "logs" / "vllm_fit.log",
        budget["device"],
    )  # fmt: skip
    error = json.loads(path.read_text()).get("fit_error") or {}
    median = (error.get("step") or {}).get("median")  # a whole step's time, every fifth step held out
    return {
        "prices": str(path),
        "fit_error": error,
        "summary": f"{path.name}: held-out step error, median "
        + ("?" if median is None else f"{100 * median:.1f}%"),
    }


def share_scenarios(budget: dict[str, Any], out: Path, prices_file: str) -> list[Path]:
    """The shipped ``vllm_share_B`` scenarios, each copied to name this device's prices (and the
    budget's tokens per request, ``vllm_trace_tokens``, where it sets them), under
    ``<out>/vllm/scenarios``."""
    folder = out / "vllm" / "scenarios"
    folder.mkdir(parents=True, exist_ok=True)
    copies = []
    for rows in budget["vllm_batches"]:
        name = SHARE.format(rows=rows)
        scenario = yaml.safe_load(scenario_path(name).read_text())
        scenario["latency"] = str(Path(prices_file).resolve())
        if budget["vllm_trace_tokens"]:
            scenario["max_new_tokens"] = budget["vllm_trace_tokens"]
        copy = folder / f"{name}.yaml"
        write_text_atomic(
            copy,
            f"# {name}, priced by this device's vLLM steps (experiments/gpu_check.py --vllm)\n"
            + yaml.safe_dump(scenario, sort_keys=False),
        )
        copies.append(copy)
    return copies


def collect(budget: dict[str, Any], out: Path, scenarios: list[Path]) -> dict[str, Any]:
    """The copies' traces, recorded inside vLLM where the package or the cache has none."""
    log = out / "logs" / "vllm_collect.log"
    run_script("collect", ["--scenarios", *map(str, scenarios), "--engine", "vllm"], log, budget["device"])
    return {
        "scenarios": [str(p) for p in scenarios],
        "summary": f"{len(scenarios)} scenarios; log {log.name}",
    }


def train(budget: dict[str, Any], out: Path, scenarios: list[Path]) -> dict[str, Any]:
    """PPO on the copies' train traces at this device's vLLM prices, warm-started from the best
    rule, selected on their validation traces, exported to ``<out>/vllm/policy``."""
    folder = out / "vllm" / "policy"
    names = [str(p) for p in scenarios]
    arguments = ["--scenarios", *names, "--latency-profiles", "machine", "--select-scenarios",
                 "--eval-scenarios", "--validate-scenarios", "--no-stop", "--export-as", str(folder),
                 "--runs-dir", str(out / "runs"), "--exp-name", "vllm"]  # fmt: skip
    if budget["vllm_ppo_timesteps"]:
        arguments += [
            "--total-timesteps",
            str(budget["vllm_ppo_timesteps"]),
            "--n-envs",
            str(budget["n_envs"]),
        ]
        arguments += ["--eval-freq", str(budget["eval_freq"])]
    run_script("train", arguments, out / "logs" / "vllm_train.log", budget["device"])
    evaluation = json.loads((folder / "metadata.json").read_text()).get("evaluation", {})
    return {
        "folder": str(folder),
        "timesteps": evaluation.get("training_steps"),
        "summary": f"{evaluation.get('training_steps')} PPO steps; {folder}",
    }


def bench(budget: dict[str, Any], out: Path, policy: str) -> dict[str, Any]:
    """The policy inside vLLM against vLLM's own settings tuned on validation."""
    stem = out / "vllm" / "bench" / "bench"
    stem.parent.mkdir(parents=True, exist_ok=True)
    run_script(
        "bench_vllm.py",
        ["--policy", policy, "--static-k", *map(str, budget["vllm_static_k"]),
         "--fixed-batches", *map(str, budget["vllm_batches"]), "--requests", str(budget["vllm_requests"]),
         "--repeats", str(budget["vllm_repeats"]),
         "--validation-repeats", str(budget["vllm_validation_repeats"]),
         "--max-new-tokens", str(budget["vllm_tokens"]), "--no-iomp", "--no-own-engine", "--no-tcp-draft",
         "--out", str(stem)],
        out / "logs" / "vllm_bench.log",
        budget["device"],
    )  # fmt: skip
    report = json.loads(stem.with_suffix(".json").read_text())
    label = f"specrl {policy}"  # bench_vllm's row of the policy (without a cut-off)
    ratios = {name: cell["vs_plain"] for name, cell in report["rows"][label].items()}
    return {
        "page": str(stem.with_suffix(".md")),
        "policy_vs_no_speculation": ratios,
        "summary": f"{label}: "
        + ", ".join(f"{name} {ratio:.2f}x" for name, ratio in ratios.items())
        + " no speculation",
    }


def run_pipeline(record: Any, budget: dict[str, Any], out: Path) -> None:
    """The stages in order into ``record`` (a :class:`~gpu_check_parts.record.Record`), each
    skipped when the one it needs did not pass."""
    record.stage("vllm-environment", environment)
    recorded = record.stage("vllm-prices", lambda: prices(budget, out), needs=("vllm-environment",))
    fitted = record.stage("vllm-fit", lambda: fit(budget, out, recorded), needs=("vllm-prices",))
    collected = record.stage(
        "vllm-collect",
        lambda: collect(budget, out, share_scenarios(budget, out, fitted["prices"])),
        needs=("vllm-fit",),
    )
    policy = record.stage(
        "vllm-train",
        lambda: train(budget, out, [Path(p) for p in collected["scenarios"]]),
        needs=("vllm-collect",),
    )
    record.stage("vllm-bench", lambda: bench(budget, out, policy["folder"]), needs=("vllm-train",))
