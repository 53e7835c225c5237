"""One GPU, about six minutes: is specrl lossless there, and what does speculation buy on it?

    python experiments/gpu_check.py --out results/gpu                 # on a machine with one CUDA GPU
    python experiments/gpu_check.py --smoke --out /tmp/gpu-check      # every budget shrunk: CPU, ~1 minute

Stages, in order, each timed and recorded in <out>/gpu_check.json (<out>/gpu_check.md is the summary;
both are rewritten after every stage, so an interrupted run keeps what it did):

1. environment  torch, CUDA and transformers versions, the GPU's name and memory, the commit. (With
                --device cuda where torch sees no GPU the script refuses to start, saying what to do.)
2. lossless     ``specrl.selfcheck`` on the device: greedy equality with the target's own greedy
                decoding in float32 (TF32 off) for k in 0..8 and tau 0 / 0.5, dynamic and static KV
                cache (pass/fail); the same in bf16 as information (near-ties may flip); the law of the
                first two sampled tokens against the exact one, chi-square over --samples generations.
3. build        the "gpu" zoo preset (a 312M-parameter Llama target, a distilled 8.5M draft) trained
                on the device, capped at --train-seconds from the start of the build; into
                $SPECRL_HOME/zoo/gpu-seed0, where the scripts below find it. Its card records the GPU,
                the steps done and whether the cap was hit. A complete earlier build is reused
                (--rebuild trains again). Then the built pair's greedy agreement in its own dtype
                (bf16 on a GPU; information).
4. calibrate    the pair's latency model from the engine's own loop on the device (--calibration-steps
                steps), saved where train_ppo.py and evaluate.py read it (``latency: calibrated``).
5. policy       experiments/train_ppo.py: --ppo-timesteps of PPO on the train traces of --scenarios
                (recorded on first use: plainly decoded prompts, cached), checkpoint chosen on
                validation traces, exported to <out>/policy/quick.
6. benchmark    experiments/evaluate.py on the test prompts of --scenarios: plain decoding, static
                k = 2 and 4, the best static, TCP, our versions of Hugging Face's rules, AdaEDL, a
                SpecDec++-style stop, HF generate plain and assisted, and the quick policy; the real
                loop (wall clock, median of --repeats) and the simulator; into <out>/evaluate/.
7. bench-compile (only with --bench-compile; about two more minutes) experiments/bench_decode.py with
                --kv-cache static --compile: our engine against HF generate, compiled decode forwards.

Time on one H200, estimated (no GPU was available when this was written; the JSON records the real
ones): environment and imports ~10 s; lossless ~30 s (4 x 1,000 generations of a 2-layer model,
~5 ms each); build <= 180 s (the cap; ~30 s of corpus and tokenizer on the host, then 600 target
and 500 distillation steps estimated at ~130 s: specrl/zoo/presets.py says how); calibrate ~20 s
(1,500 steps of ~10 ms); policy ~55 s (24 traced episodes of 128 tokens at ~7 ms a token, 32,768
PPO steps on the CPU); benchmark ~55 s (13 rows x 4 passes x one 128-token episode). About 350 s.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import transformers

import specrl
from specrl import selfcheck
from specrl.envs import load_scenario
from specrl.io import write_text_atomic
from specrl.latency import latency_path, learn
from specrl.models import PairError, check_device
from specrl.provenance import git_commit
from specrl.tables import markdown_table
from specrl.zoo.build import build, cached_dir, is_complete, shipped_dir, specrl_home

REPO = Path(__file__).resolve().parent.parent
AIM_SECONDS = 360  # the whole run on one H200 (issue 16)

# Every budget, for a GPU run and for --smoke (the CPU, CI). A flag given on the command line wins.
BUDGETS = {
    "gpu": dict(
        preset="gpu",
        device="cuda",
        samples=1000,
        tokens=24,
        ks=(0, 1, 2, 4, 8),
        train_seconds=180.0,
        agreement_tokens=64,
        calibration_steps=1500,
        ppo_timesteps=32768,
        n_envs=128,
        eval_freq=16384,
        episodes=1,
        repeats=3,
        latency=None,  # the scenarios' own: calibrated
        threads=None,  # torch's own
    ),
    "smoke": dict(
        preset="tiny",
        device="cpu",
        samples=300,
        tokens=16,
        ks=(0, 2, 4),
        train_seconds=120.0,  # the tiny pair trains in ~8 s on 2 quiet CPU cores: not hit
        agreement_tokens=16,
        calibration_steps=300,
        ppo_timesteps=2048,
        n_envs=8,
        eval_freq=1024,
        episodes=1,
        repeats=1,
        latency="constant",
        threads=1,  # small models on a shared CPU: one thread is faster than two fighting over the cores
    ),
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="output folder (e.g. results/gpu)")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="shrink every budget: the tiny pair on the CPU, few samples and PPO steps, one repeat, "
        "constant latency in the benchmark's simulator (what CI runs; its numbers mean nothing)",
    )
    parser.add_argument(
        "--device", choices=("cuda", "cpu"), default=None, help="cuda (default; the first GPU) or cpu"
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=["code"],
        help="scenarios the policy trains on and the benchmark runs",
    )
    parser.add_argument("--samples", type=int, default=None, help="generations per chi-square test (1000)")
    parser.add_argument("--train-seconds", type=float, default=None, help="cap of the pair's build (180)")
    parser.add_argument("--rebuild", action="store_true", help="train the pair again even if it is built")
    parser.add_argument("--calibration-steps", type=int, default=None, help="timed loop steps (1500)")
    parser.add_argument("--ppo-timesteps", type=int, default=None, help="PPO env steps (32768)")
    parser.add_argument("--episodes", type=int, default=None, help="benchmark episodes per scenario (1)")
    parser.add_argument("--repeats", type=int, default=None, help="benchmark repeats, median reported (3)")
    parser.add_argument(
        "--bench-compile",
        action="store_true",
        help="also run bench_decode.py with a static KV cache and torch.compile (adds minutes)",
    )
    args = parser.parse_args(argv)
    budget = dict(BUDGETS["smoke" if args.smoke else "gpu"])
    for name in (
        "device",
        "samples",
        "train_seconds",
        "calibration_steps",
        "ppo_timesteps",
        "episodes",
        "repeats",
    ):
        if getattr(args, name) is not None:
            budget[name] = getattr(args, name)
    if min(budget["samples"], budget["calibration_steps"], budget["ppo_timesteps"]) < 1:
        parser.error("--samples, --calibration-steps and --ppo-timesteps must be positive")
    if min(budget["episodes"], budget["repeats"]) < 1 or budget["train_seconds"] <= 0:
        parser.error("--episodes and --repeats must be >= 1, --train-seconds > 0")
    args.budget = budget
    return args


# ---- the record of the run: stages, times, the JSON and the markdown --------------------------


class Record:
    """The run's stages in order, each with its status, seconds and result; written after each."""

    def __init__(self, out: Path, args: argparse.Namespace) -> None:
        self.out, self.started = out, time.perf_counter()
        self.report = {
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "smoke": args.smoke,
            "budget": {k: list(v) if isinstance(v, tuple) else v for k, v in args.budget.items()},
            "scenarios": args.scenarios,
            "aim_seconds": AIM_SECONDS,
            "stages": {},
        }

    def stage(self, name: str, run: Callable[[], dict], needs: tuple[str, ...] = ()) -> dict | None:
        """Run one stage; an exception fails it (its message recorded), and a stage whose ``needs``
        did not pass is skipped. Returns the stage's result, or None."""
        missing = [n for n in needs if self.report["stages"].get(n, {}).get("status") != "ok"]
        if missing:
            entry = {"status": "skipped", "seconds": 0.0, "reason": f"needs {', '.join(missing)}"}
        else:
            print(f"\n== {name} (at {self.elapsed():.0f} s)", flush=True)
            started = time.perf_counter()
            try:
                result = run()
                status = "ok" if result.get("passed", True) is not False else "failed"
                entry = {"status": status, "result": result}
            except (Exception, SystemExit) as error:  # noqa: BLE001 - recorded, then the next stage
                entry = {"status": "failed", "error": f"{type(error).__name__}: {error}"}
            entry["seconds"] = round(time.perf_counter() - started, 1)
        self.report["stages"][name] = entry
        print(f"== {name}: {entry['status']} in {entry['seconds']:.1f} s (total {self.elapsed():.0f} s)")
        if "error" in entry or "reason" in entry:
            print(f"   {entry.get('error') or entry.get('reason')}")
        self.write()
        return entry.get("result")

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def write(self) -> None:
        self.report["seconds"] = round(self.elapsed(), 1)
        self.report["passed"] = all(s["status"] == "ok" for s in self.report["stages"].values())
        write_text_atomic(self.out / "gpu_check.json", json.dumps(self.report, indent=1) + "\n")
        write_text_atomic(self.out / "gpu_check.md", render_markdown(self.report))


# ---- the stages --------------------------------------------------------------------------------


def environment(device: str) -> dict:
    """Versions and the machine; refuses a CUDA device that torch does not see."""
    check_device(torch.device(device))
    info = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "specrl": specrl.__version__,
        "commit": git_commit(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": device,
        "specrl_home": str(specrl_home()),
    }
    if device == "cuda":
        properties = torch.cuda.get_device_properties(0)
        info.update(
            gpu=properties.name,
            gpu_memory_gib=round(properties.total_memory / 2**30, 1),
            capability=f"{properties.major}.{properties.minor}",
            cudnn=torch.backends.cudnn.version(),
            gpus=torch.cuda.device_count(),
        )
    print(json.dumps(info, indent=1))
    return info


def lossless(budget: dict) -> dict:
    """The library's self-check on the device (specrl/selfcheck.py)."""
    return selfcheck.run_selfcheck(
        budget["device"], samples=budget["samples"], tokens=budget["tokens"], ks=budget["ks"], log=print
    )


def build_pair(budget: dict, rebuild: bool, holder: dict) -> dict:
    """Train the preset's pair under the cap (or reuse it), load it, check its greedy agreement."""
    preset, device = budget["preset"], budget["device"]
    if is_complete(shipped_dir(preset)):
        raise SystemExit(f"preset {preset!r} ships weights: this check trains a preset that does not")
    pair_dir = cached_dir(preset, 0)
    reused = is_complete(pair_dir) and not rebuild
    if reused:
        print(f"reusing the pair built in {pair_dir} (--rebuild trains it again)")
    else:
        print(f"training the '{preset}' pair into {pair_dir}, capped at {budget['train_seconds']:.0f} s")
        command = f"python experiments/gpu_check.py (the build stage: --preset {preset}, capped)"
        build(preset, 0, pair_dir, device=device, command=command, max_seconds=budget["train_seconds"])
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    pair = specrl.load_pair(preset=preset, device=device)
    holder["pair"] = pair
    card = pair.card or {}
    prompts = [pair.encode(text) for text in pair.prompts["test"]["code"][:2]]
    agreement = selfcheck.check_greedy(
        pair,
        prompts,
        tokens=budget["agreement_tokens"],
        ks=(2, 4),
        taus=(0.0,),
        caches=("dynamic",),
        strict=False,
    )
    agreement.pop("unequal_runs")
    print(f"greedy agreement of the built pair ({agreement['dtype']}): {agreement}")
    return {
        "dir": str(pair_dir),
        "reused": reused,
        "built_with": card.get("built_with"),
        "budget": card.get("budget"),
        "parameters": card.get("parameters"),
        "final_train_loss": card.get("final_train_loss"),
        "heldout": card.get("heldout"),
        "dtype": str(pair.dtype).removeprefix("torch."),
        "greedy_agreement": agreement,
    }


def calibrate(budget: dict, scenarios: list[str], holder: dict) -> dict:
    """The latency model of the pair on the device, saved where ``latency: calibrated`` reads it."""
    pair = holder["pair"]
    k_max = max(load_scenario(name).k_max for name in scenarios)
    model = learn(pair, k_max=k_max, steps=budget["calibration_steps"])
    path = latency_path(pair)
    model.save(path)
    holder.pop("pair")  # the scripts below load their own copy
    del pair
    gc.collect()
    if budget["device"] == "cuda":
        torch.cuda.empty_cache()
    result = {
        "file": str(path),
        "device": model.device,
        "steps": budget["calibration_steps"],
        "k_max": k_max,
        "target_ms_1_token_context_256": round(model.target_seconds(1, 256) * 1e3, 3),
        "target_ms_9_tokens_context_256": round(model.target_seconds(9, 256) * 1e3, 3),
        "draft_ms_context_256": round(model.draft_seconds(256) * 1e3, 3),
        "plain_tokens_per_s": round(model.plain_tokens_per_s, 1),
        "fit_error": model.fit_error,
    }
    print({k: v for k, v in result.items() if k != "fit_error"})
    return result


def run_script(script: str, arguments: list[str], log: Path, device: str) -> None:
    """``python experiments/<script> ARGUMENTS``, its output shown and kept in ``log``; raises on failure.
    On the CPU it sees no GPU (CUDA_VISIBLE_DEVICES empty), so that every script runs where the check does."""
    command = [sys.executable, str(REPO / "experiments" / script), *arguments]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    if torch.get_num_threads() == 1:  # the scripts too (the latency file's name has the count)
        env["OMP_NUM_THREADS"] = "1"
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    print("$ " + " ".join(command[1:]), flush=True)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as handle:
        process = subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        assert process.stdout is not None
        for line in process.stdout:
            sys.stdout.write(line)
            handle.write(line)
        code = process.wait()
    if code != 0:
        raise RuntimeError(f"{script} exited with {code}; its output is in {log}")


def quick_policy(budget: dict, scenarios: list[str], out: Path) -> dict:
    """PPO on the pair's train traces, a small budget; the policy exported to <out>/policy/quick."""
    folder = out / "policy" / "quick"
    # train_ppo.py is run in the mode of its docstring's smoke line: no real-loop validation (the
    # benchmark stage does that) and no extra scenarios in its simulator comparison.
    run_script(
        "train_ppo.py",
        ["--preset", budget["preset"], "--scenarios", *scenarios, "--eval-scenarios", "--validate-scenarios",
         "--total-timesteps", str(budget["ppo_timesteps"]), "--n-envs", str(budget["n_envs"]),
         "--eval-freq", str(budget["eval_freq"]), "--policies-dir", str(folder.parent),
         "--policy-name", folder.name, "--runs-dir", str(out / "runs"), "--exp-name", "gpu-check"],
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


def benchmark(budget: dict, scenarios: list[str], out: Path, smoke: bool) -> dict:
    """evaluate.py on the test prompts: every controller, the real loop and the simulator."""
    folder = out / "evaluate"
    arguments = ["--preset", budget["preset"], "--device", budget["device"], "--scenarios", *scenarios,
                 "--policy", str(out / "policy" / "quick"), "--episodes", str(budget["episodes"]),
                 "--repeats", str(budget["repeats"]), "--out", str(folder)]  # fmt: skip
    if budget["latency"]:
        arguments += ["--latency", budget["latency"]]
    if smoke:
        arguments += ["--no-progress"]
    run_script("evaluate.py", arguments, out / "logs" / "evaluate.log", budget["device"])
    results = json.loads((folder / "results.json").read_text())
    return {"folder": str(folder), "latency": results.get("latency"), "headline": headline(results)}


def bench_compile(budget: dict, out: Path) -> dict:
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
    acceptance, and its simulator tokens/s, from evaluate.py's results.json."""
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


# ---- the summary -------------------------------------------------------------------------------


def render_markdown(report: dict) -> str:
    stages = report["stages"]
    env = stages.get("environment", {}).get("result", {})
    machine = env.get("gpu") or f"{env.get('device', '?')} ({env.get('cpus', '?')} CPUs)"
    lines = [
        "# GPU check" + (" (smoke run: shrunk budgets, numbers mean nothing)" if report["smoke"] else ""),
        "",
        f"{report['date']}, `{report['command']}`. Machine: {machine}"
        + (f", {env['gpu_memory_gib']} GiB" if "gpu_memory_gib" in env else "")
        + f"; torch {env.get('torch')} (CUDA {env.get('cuda')}), transformers {env.get('transformers')}, "
        f"commit {env.get('commit')}.",
        "",
        f"Total {report['seconds']:.0f} s (aim: {report['aim_seconds']} s on one H200); "
        + ("every stage passed." if report["passed"] else "NOT every stage passed."),
        "",
        markdown_table(
            ["stage", "status", "seconds", "result"],
            [[name, s["status"], f"{s['seconds']:.1f}", stage_line(name, s)] for name, s in stages.items()],
        ),
    ]
    bench = stages.get("benchmark", {}).get("result")
    for scenario, rows in (bench or {}).get("headline", {}).items():
        lines += [
            "",
            f"## {scenario}: tokens/s on the test prompts",
            "",
            f"Real loop: wall clock, median of {report['budget']['repeats']} repeats, "
            f"{report['budget']['episodes']} episode(s); simulator: modeled time ({bench.get('latency')}). "
            f"Every row: {bench['folder']}/results.md.",
            "",
            markdown_table(
                ["controller", "real tok/s", "vs plain", "vs TCP", "acceptance", "sim tok/s"],
                [
                    [
                        row["label"],
                        number(row["real_tokens_per_s"], 1),
                        ratio(row["speedup"]),
                        ratio(row["ratio_to_tcp"]),
                        number(row["acceptance_rate"], 3),
                        number(row["sim_tokens_per_s"], 1),
                    ]
                    for row in rows
                ],  # fmt: skip
            ),
        ]
    return "\n".join(lines) + "\n"


def stage_line(name: str, stage: dict) -> str:
    """One cell: what the stage found."""
    if "result" not in stage:
        return (stage.get("error") or stage.get("reason") or "").replace("|", "\\|").replace("\n", " ")
    r = stage["result"]
    if name == "environment":
        return f"{r.get('gpu') or r['device']}, torch {r['torch']}, CUDA {r['cuda']}"
    if name == "lossless":
        g, s, b = (r["checks"][c] for c in ("greedy_float32", "sampling_float32", "greedy_bfloat16"))
        return (
            f"greedy float32: {'equal' if g['all_equal'] else 'UNEQUAL'} in {g['runs']} runs "
            f"(accepts and rejects: {g['accepts_and_rejects']}); chi-square of {s['samples']} samples: "
            f"min p {s['min_p_value']:.3g}; bf16 (information): {b['mean_agree']:.1f} of {b['tokens']} "
            f"tokens agree on average (min {b['min_agree']})"
        )
    if name == "build":
        budget, parameters = r.get("budget") or {}, r["parameters"]
        steps = ", ".join(
            f"{model} {done}/{budget['planned_steps'][model]}"
            for model, done in budget.get("steps", {}).items()
        )
        return (
            ("reused; " if r["reused"] else "")
            + f"target {parameters['target'] / 1e6:.3g}M, draft {parameters['draft'] / 1e6:.3g}M parameters; "
            + (
                f"steps {steps}, cap {budget['max_seconds']:.0f} s {'hit' if budget['hit'] else 'not hit'}; "
                if steps
                else ""
            )  # fmt: skip
            + f"greedy agreement ({r['dtype']}): {r['greedy_agreement']['mean_agree']:.1f} of "
            f"{r['greedy_agreement']['tokens']} tokens on average"
        )
    if name == "calibrate":
        return (
            f"target {r['target_ms_1_token_context_256']} ms (1 token), "
            f"draft {r['draft_ms_context_256']} ms; plain {r['plain_tokens_per_s']} tok/s modeled"
        )
    if name == "policy":
        validation = number(r["ratio_vs_tcp_sim_validation"], 3)
        return f"{r['timesteps']} PPO steps; ratio vs TCP on validation traces (simulator) {validation}"
    if name == "benchmark":
        return f"{sum(len(rows) for rows in r['headline'].values())} rows in {r['folder']}"
    return r.get("folder", "")


def number(value, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def ratio(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


# ---- the run -----------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    budget, out = args.budget, args.out
    try:
        check_device(torch.device(budget["device"]))
    except PairError as error:
        raise SystemExit(f"gpu_check: {error}") from None
    if budget["threads"]:
        torch.set_num_threads(budget["threads"])
    record = Record(out, args)
    holder: dict = {}  # the pair, from the build stage to the calibration
    record.stage("environment", lambda: environment(budget["device"]))
    record.stage("lossless", lambda: lossless(budget))
    record.stage("build", lambda: build_pair(budget, args.rebuild, holder), needs=("environment",))
    record.stage("calibrate", lambda: calibrate(budget, args.scenarios, holder), needs=("build",))
    record.stage("policy", lambda: quick_policy(budget, args.scenarios, out), needs=("calibrate",))
    record.stage(
        "benchmark", lambda: benchmark(budget, args.scenarios, out, args.smoke), needs=("calibrate",)
    )
    if args.bench_compile:
        record.stage("bench-compile", lambda: bench_compile(budget, out), needs=("build",))
    report = record.report
    print(f"\nwrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}; total {report['seconds']:.0f} s")
    print("every stage passed" if report["passed"] else "NOT every stage passed: see gpu_check.md")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
