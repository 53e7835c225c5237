"""Fidelity of the trace-replay simulator: the same controllers on the same held-out episodes
in the simulator and in the real loop.

For each scenario and controller: tokens/sec and acceptance rate in the simulator
(TraceReplayEnv), in the real env (SpecDecodeEnv) with the latency model's time, and in the
real env with measured wall-clock time. One real run gives both real columns: its step
results carry the measured seconds, and the latency model prices the same steps. Greedy
episodes replay exactly; sampled ones agree in distribution (more episodes, seeds differ).

    python experiments/sim_vs_real.py                     # default pair, results/sim_vs_real.{json,md}
    python experiments/sim_vs_real.py --preset tiny --prompts 2 --scenarios code   # smoke
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
from pathlib import Path

import numpy as np

from specrl.controllers import HFHeuristicController, StaticController, TCPController
from specrl.envs import EpisodeSummary, SpecDecodeEnv, load_scenario
from specrl.io import write_text_atomic
from specrl.latency import calibrated
from specrl.traces import TraceSet, cached_traces
from specrl.training import evaluate_controller

CONTROLLERS = {
    "static k=1": lambda: StaticController(1),
    "static k=3": lambda: StaticController(3),
    "static k=5": lambda: StaticController(5),
    "static k=8": lambda: StaticController(8),
    "static k=6 tau=0.4": lambda: StaticController(6, 0.4),
    "tcp": TCPController,
    "tcp tau=0.25": TCPController.with_confidence_cut,
    "hf-heuristic": HFHeuristicController,
}


def subset(traces: TraceSet, count: int) -> TraceSet:
    """The first ``count`` traces of each domain."""
    keep, seen = [], {}
    for trace in traces.traces:
        seen[trace.domain] = seen.get(trace.domain, 0) + 1
        if seen[trace.domain] <= count:
            keep.append(trace)
    return TraceSet.from_traces(keep, traces.meta)


def run_real(
    env: SpecDecodeEnv, controller, traces: TraceSet, latency, repeats: int
) -> tuple[EpisodeSummary, EpisodeSummary]:
    """(modeled, wall-clock) totals of the controller over the traces' episodes."""
    modeled, wallclock = EpisodeSummary(), EpisodeSummary()
    for repeat in range(1 if traces.greedy else repeats):
        for trace in traces.traces:
            observation, _ = env.reset(
                seed=trace.seed + 100_000 * repeat,
                options={"domain": trace.domain, "prompt_index": trace.prompt_index},
            )
            controller.reset()
            done = False
            while not done:
                observation, _, done, _, info = env.step(controller.act(observation))
                result = info["step_result"]
                controller.observe(result)
                draft, verify = latency.seconds(result)
                for totals, seconds in ((modeled, draft + verify), (wallclock, result.seconds)):
                    totals.tokens += result.emitted
                    totals.seconds += seconds
                    totals.steps += 1
                    totals.proposed += result.proposed
                    totals.accepted += result.accepted
    return modeled, wallclock


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--preset", default=None, help="embedded pair instead of the scenarios' (small, tiny)"
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=["code", "prose", "math", "code_to_math", "code_t1"],
        help="scenario names or YAML paths",
    )
    parser.add_argument("--prompts", type=int, default=6, help="held-out traces (episodes) per domain")
    parser.add_argument("--repeats", type=int, default=4, help="episodes per trace for sampled scenarios")
    parser.add_argument("--out", default="results/sim_vs_real", help="output stem (.json and .md are added)")
    args = parser.parse_args()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)

    rows = []
    pair = latency = None
    for name in args.scenarios:
        scenario = load_scenario(name).with_overrides(split="heldout", time="modeled", preset=args.preset)
        pair = pair or scenario.pair.load()
        latency = latency or calibrated(pair, k_max=scenario.k_max)
        traces = subset(cached_traces(scenario, "heldout", pair), args.prompts)
        env = SpecDecodeEnv(scenario, pair=pair, split="heldout", time="wallclock", latency=latency)
        env.reset(seed=0)  # warm-up
        for label, make in CONTROLLERS.items():
            sim = evaluate_controller(make(), scenario, traces, latency, repeats=args.repeats)
            modeled, wallclock = run_real(env, make(), traces, latency, args.repeats)
            rows.append(
                {
                    "scenario": name,
                    "controller": label,
                    "sim": sim.to_dict(),
                    "real_modeled": modeled.to_dict(),
                    "real_wallclock": wallclock.to_dict(),
                }
            )
            print(
                f"{name:>14} {label:>20}: sim {sim.tokens_per_s:7.1f}  "
                f"real modeled {modeled.tokens_per_s:7.1f}  "
                f"wall clock {wallclock.tokens_per_s:7.1f} tokens/s",
                flush=True,
            )

    lines = [
        "| scenario | controller | sim tok/s | real (modeled) tok/s | gap | real (wall clock) tok/s | gap "
        "| sim accept | real accept |",
        "|---" * 9 + "|",
    ]
    worst, rankings = 0.0, {}
    for row in rows:
        sim, modeled, wall = (row[k]["tokens_per_s"] for k in ("sim", "real_modeled", "real_wallclock"))
        gap, wall_gap = sim / modeled - 1, sim / wall - 1
        worst = max(worst, abs(gap))
        rankings.setdefault(row["scenario"], []).append((row["controller"], sim, modeled, wall))
        lines.append(
            f"| {row['scenario']} | {row['controller']} | {sim:.1f} | {modeled:.1f} | {gap:+.1%} | "
            f"{wall:.1f} | {wall_gap:+.1%} | {row['sim']['acceptance_rate']:.3f} | "
            f"{row['real_modeled']['acceptance_rate']:.3f} |"
        )
    same_order = {}
    for scenario, entries in rankings.items():
        order = [[e[0] for e in sorted(entries, key=lambda e: -e[i])] for i in (1, 2, 3)]
        same_order[scenario] = {
            "modeled": order[0] == order[1],
            "wallclock": order[0] == order[2],
            "spearman_wallclock": float(
                np.corrcoef(
                    np.argsort(np.argsort([-e[1] for e in entries])),
                    np.argsort(np.argsort([-e[3] for e in entries])),
                )[0, 1]
            ),
        }
    modeled_ranks = ", ".join(f"{s}: {v['modeled']}" for s, v in same_order.items())
    wall_ranks = ", ".join(f"{s}: {v['spearman_wallclock']:.2f}" for s, v in same_order.items())
    summary = (
        f"Largest |sim / real (modeled) - 1|: {worst:.1%}. Same ranking as the real env with modeled "
        f"time: {modeled_ranks}. With wall-clock time (Spearman rank correlation): {wall_ranks}."
    )
    machine = f"{platform.processor() or platform.machine()}, {latency.device}"
    text = "\n".join(lines) + f"\n\n{summary}\n\nMachine: {machine}. Command: `{command}`\n"
    write_text_atomic(Path(args.out).with_suffix(".md"), text)
    write_text_atomic(
        Path(args.out).with_suffix(".json"),
        json.dumps(
            {
                "rows": rows,
                "ranking": same_order,
                "worst_modeled_gap": worst,
                "command": command,
                "latency_device": latency.device,
                "pair": pair.name,
            },
            indent=2,
        ),
    )
    print("\n" + text)


if __name__ == "__main__":
    main()
