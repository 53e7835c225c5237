"""One GPU, about six minutes: is specrl lossless there, and what does speculation buy on it?

    python experiments/gpu_check.py --out results/gpu                 # on a machine with one CUDA GPU
    python experiments/gpu_check.py --smoke --out /tmp/gpu-check      # every budget shrunk: CPU, ~1 minute
    python experiments/gpu_check.py --vllm-only --out results/gpu_vllm  # the pipeline inside vLLM only

Stages, in order, each timed and recorded in <out>/gpu_check.json (<out>/gpu_check.md is the summary;
both are rewritten after every stage, so an interrupted run keeps what it did):

1. environment  torch, CUDA and transformers versions, the GPU's name and memory, the commit. (With
                --device cuda where torch sees no GPU the script refuses to start, saying what to do.)
2. lossless     ``specrl.selfcheck`` on the device: greedy equality with the target's own greedy
                decoding in float32 (TF32 off) for k in 0..8 and tau 0 / 0.5, dynamic and static KV
                cache (pass/fail); the same in bf16 as information (near-ties may flip); the law of the
                first two sampled tokens against the exact one, chi-square over --samples generations.
3. build        the "gpu" embedded-pair preset (a 312M-parameter Llama target, a distilled 8.5M draft) trained
                on the device, capped at --train-seconds from the start of the build; into
                $SPECRL_HOME/embedded/gpu-seed0, where the scripts below find it. Its card records the GPU,
                the steps done and whether the cap was hit. A complete earlier build is reused
                (--rebuild trains again). Then the built pair's greedy agreement in its own dtype
                (bf16 on a GPU; information).
4. calibrate    the pair's latency model from the engine's own loop on the device (--calibration-steps
                steps), saved where specrl train and specrl evaluate read it (``latency: calibrated``).
5. policy       specrl train: --ppo-timesteps of PPO on the train traces of --scenarios
                (recorded on first use: plainly decoded prompts, cached), checkpoint chosen on
                validation traces, exported to <out>/policy/quick.
6. benchmark    specrl evaluate on the test prompts of --scenarios: plain decoding, static
                k = 2 and 4, the best static, TCP, our versions of Hugging Face's rules, AdaEDL, a
                SpecDec++-style stop, HF generate plain and assisted, and the quick policy; the real
                loop (wall clock, median of --repeats) and the simulator; into <out>/evaluate/.
7. bench-compile (only with --bench-compile; about two more minutes) experiments/bench_decode.py with
                --kv-cache static --compile: our engine against HF generate, compiled decode forwards.
8. vllm-*       (only with --vllm or --vllm-only, in an environment with vLLM: hours on a GPU at the full
                budget) the pipeline inside vLLM on the embedded pair: vLLM's prices recorded over every
                action and fitted, the share scenarios' traces collected in vLLM, a per-request policy
                trained on them, and experiments/bench_vllm.py with it (gpu_check_parts/vllm_stages.py).

Time on one H200, estimated (no GPU was available when this was written; the JSON records the real
ones): environment and imports ~10 s; lossless ~30 s (4 x 1,000 generations of a 2-layer model,
~5 ms each); build <= 180 s (the cap; ~30 s of corpus and tokenizer on the host, then 600 target
and 500 distillation steps estimated at ~130 s: specrl/embedded/presets.py says how); calibrate ~20 s
(1,500 steps of ~10 ms); policy ~55 s (24 traced episodes of 128 tokens at ~7 ms a token, 32,768
PPO steps on the CPU); benchmark ~55 s (13 rows x 4 passes x one 128-token episode). About 350 s.

What each stage does lives in experiments/gpu_check_parts/; this script parses the flags and runs
the stages in order.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpu_check_parts.budgets import resolve_budget


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
    pipeline = parser.add_mutually_exclusive_group()
    pipeline.add_argument(
        "--vllm",
        action="store_true",
        help="also run the pipeline inside vLLM (record its prices, fit, collect, train, bench; "
        "gpu_check_parts/vllm_stages.py), in an environment with vLLM (hours on a GPU)",
    )
    pipeline.add_argument(
        "--vllm-only", action="store_true", help="only the environment and the pipeline inside vLLM"
    )
    parser.add_argument(
        "--bench-compile",
        action="store_true",
        help="also run bench_decode.py with a static KV cache and torch.compile (adds minutes)",
    )
    args = parser.parse_args(argv)
    try:
        args.budget = resolve_budget(args.smoke, vars(args))
    except ValueError as error:
        parser.error(str(error))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # torch, transformers and specrl only now: a bad flag is refused at once
    import torch
    from gpu_check_parts.record import Record
    from gpu_check_parts.script_stages import bench_compile, benchmark, quick_policy
    from gpu_check_parts.stages import build_pair, calibrate, environment, lossless, require_device
    from gpu_check_parts.vllm_stages import run_pipeline

    budget, out, scenarios = args.budget, args.out, args.scenarios
    require_device(budget["device"])
    if budget["threads"]:
        torch.set_num_threads(budget["threads"])
    record = Record(out, args.smoke, budget, scenarios)
    holder: dict = {}  # the pair, from the build stage to the calibration
    record.stage("environment", lambda: environment(budget["device"]))
    if not args.vllm_only:
        record.stage("lossless", lambda: lossless(budget))
        record.stage("build", lambda: build_pair(budget, args.rebuild, holder), needs=("environment",))
        record.stage("calibrate", lambda: calibrate(budget, scenarios, holder), needs=("build",))
        record.stage("policy", lambda: quick_policy(budget, scenarios, out), needs=("calibrate",))
        record.stage("benchmark", lambda: benchmark(budget, scenarios, out, args.smoke), needs=("calibrate",))
    if args.bench_compile:
        record.stage("bench-compile", lambda: bench_compile(budget, out), needs=("build",))
    if args.vllm or args.vllm_only:
        run_pipeline(record, budget, out)
    report = record.report
    print(f"\nwrote {out / 'gpu_check.json'} and {out / 'gpu_check.md'}; total {report['seconds']:.0f} s")
    print("every stage passed" if report["passed"] else "NOT every stage passed: see gpu_check.md")
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
