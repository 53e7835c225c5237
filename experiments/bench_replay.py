"""Speed of the trace-replay simulator: env steps per second, single env and vectorised.

Replays the default pair's test traces (greedy code and temperature-1 prose) with random
actions, in one process on one core, median of --repeats.
The single env is stepped unwrapped (``TraceReplayEnv``: the gymnasium.make wrappers add a
few microseconds per step) and through ``gymnasium.make``; the vectorised env
(``VecTraceReplay``, whose rows are ``TraceReplayEnv`` stepped in one process) at the widths of
the default training run: 16 rows (one of its eight scenario parts) and 128 (all of them).
Writes JSON and markdown.

    python experiments/bench_replay.py            # results/bench_replay.{json,md}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import gymnasium
import numpy as np
import torch

from specrl.envs import TRACE_REPLAY_ID, TraceReplayEnv, cached_traces, load_scenario
from specrl.envs.vec_replay import VecTraceReplay
from specrl.io import write_text_atomic
from specrl.latency import calibrated
from specrl.tables import markdown_table


def single_steps_per_s(env, steps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    actions = [np.array(a) for a in rng.integers(0, [9, 10], size=(steps, 2))]
    env.reset(seed=seed)
    start = time.perf_counter()
    for action in actions:
        _, _, terminated, _, _ = env.step(action)
        if terminated:
            env.reset()
    return steps / (time.perf_counter() - start)


def vec_steps_per_s(env: VecTraceReplay, steps: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    actions = rng.integers(0, [9, 10], size=(steps, env.num_envs, 2))
    env.reset()
    start = time.perf_counter()
    for batch in actions:
        env.step(batch)
    return steps * env.num_envs / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", default=["code", "prose_t1"], help="scenarios to replay")
    parser.add_argument("--steps", type=int, default=50_000, help="single-env steps per repeat")
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 128], help="vectorised env sizes")
    parser.add_argument("--repeats", type=int, default=3, help="repeats (median reported)")
    parser.add_argument("--out", default="results/bench_replay", help="output stem (.json, .md)")
    args = parser.parse_args()

    rows = []
    for name in args.scenarios:
        scenario = load_scenario(name).with_overrides(split="test", time="modeled")
        pair = scenario.pair.load()
        latency = calibrated(pair, k_max=scenario.k_max)  # this machine's (default threads) model
        torch.set_num_threads(1)  # the replay itself is numpy and Python: one core
        traces = cached_traces(scenario, "test", pair)
        single = TraceReplayEnv(scenario, traces=traces, latency=latency)
        made = gymnasium.make(TRACE_REPLAY_ID, scenario=scenario, traces=traces, latency=latency)
        results = {
            "single (unwrapped)": [single_steps_per_s(single, args.steps, r) for r in range(args.repeats)],
            "single (gymnasium.make)": [single_steps_per_s(made, args.steps, r) for r in range(args.repeats)],
        }
        for width in args.widths:
            vec = VecTraceReplay(scenario, traces, latency, num_envs=width, seed=0)
            steps = max(20, args.steps // width)
            results[f"vectorised x{width}"] = [vec_steps_per_s(vec, steps, r) for r in range(args.repeats)]
        base = statistics.median(results["single (unwrapped)"])
        for label, values in results.items():
            median = statistics.median(values)
            rows.append(
                {
                    "scenario": name,
                    "env": label,
                    "steps_per_s": median,
                    "vs_single": median / base,
                    "repeats": values,
                }
            )
            print(f"{name:>10} {label:>24}: {median:>12,.0f} steps/s ({median / base:.1f}x)", flush=True)

    machine = f"{platform.machine()}, {os.cpu_count()} logical CPUs, one thread"
    table = markdown_table(
        ["scenario", "env", "steps/s", "vs single"],
        [[r["scenario"], r["env"], f"{r['steps_per_s']:,.0f}", f"{r['vs_single']:.1f}x"] for r in rows],
        [None, None, "right", "right"],
    )
    text = table + f"\n\nMedian of {args.repeats} repeats. Machine: {machine}.\n"
    write_text_atomic(Path(args.out).with_suffix(".md"), text)
    write_text_atomic(
        Path(args.out).with_suffix(".json"), json.dumps({"rows": rows, "machine": machine}, indent=2)
    )
    print("\n" + text)


if __name__ == "__main__":
    main()
