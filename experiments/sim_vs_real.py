"""Fidelity of the trace-replay simulator: the same controllers on the same test episodes
in the simulator and in the real loop.

For each scenario and controller: tokens/sec and acceptance rate in the simulator
(TraceReplayEnv), in the real env (SpecDecodeEnv) with measured wall-clock time, and the same
real steps priced by the latency model ("real modeled"). The gaps split the simulator's error:

- sim / wall clock - 1: what the simulator gets wrong about the real loop, the number we publish;
- real modeled / wall clock - 1: the latency model's error on identical steps;
- sim / real modeled - 1: the acceptance process (0 for greedy, which replays exactly; sampling
  noise for temperature > 0, where the simulator averages ``--sim-repeats`` draws per trace and
  the real loop runs ``--repeats`` seeds).

The scenario's latency model (``latency: calibrated``: learned from the loop, see
specrl/latency/) prices the simulator; ``--baseline profile`` also prices it with the
isolated-forward profile (the model before the loop-learned one) against the same real runs,
so before and after are compared on one measurement. Real runs interleave the controllers per
episode (the same prompt and seed for each in turn), after an untimed warm-up, so machine
noise spreads over them alike.

    python experiments/sim_vs_real.py                     # default pair, results/sim_vs_real.{json,md}
    python experiments/sim_vs_real.py --preset tiny --prompts 2 --scenarios code   # smoke

What it measures lives in experiments/sim_vs_real_parts/.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

from benchmarks.result_folder import Run, commit_line, write_readme
from sim_vs_real_parts import SPLIT, render, scenario_rows, summarize

from specrl.envs import load_scenario
from specrl.io import write_text_atomic
from specrl.latency import LatencyModel, calibrated
from specrl.provenance import command_line, current_load, git_state

MEASURED = (
    "Modeled episode time against wall clock per controller and scenario: the same controllers on the "
    "same test episodes in the trace-replay simulator and in the real loop, and the gap split into the "
    "latency model's error and the acceptance process's."
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--preset", default=None, help="embedded pair instead of the scenarios' (small, tiny)"
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=["code", "prose", "math", "code_t1", "prose_t1"],
        help="scenario names or YAML paths",
    )
    parser.add_argument("--prompts", type=int, default=6, help="test traces (episodes) per domain")
    parser.add_argument(
        "--repeats", type=int, default=4, help="real episodes per trace for sampled scenarios"
    )
    parser.add_argument(
        "--sim-repeats",
        type=int,
        default=32,
        help="simulated acceptance draws per trace for sampled scenarios",
    )
    parser.add_argument(
        "--latency", default=None, help="a latency .json file instead of the calibrated (loop) model"
    )
    parser.add_argument(
        "--baseline",
        choices=["profile", "none"],
        default="profile",
        help="also price the simulator with the isolated-forward profile (default) or not",
    )
    parser.add_argument(
        "--out", default="results/sim_vs_real/sim_vs_real", help="output stem (.json and .md are added)"
    )
    parser.add_argument(
        "--render", type=Path, default=None, metavar="JSON", help="only rewrite the .md of a run's JSON"
    )
    return parser.parse_args()


def write_readme_of(results: dict, stem: Path) -> None:
    """The run's section of its result folder's README.md."""
    commit = commit_line({"git": results["git"]}) if results.get("git") else "not recorded"
    files = [f"{stem.name}.md"], [f"{stem.name}.json"]
    run = Run(f"Simulator against the real loop: `{stem.name}`", MEASURED, results["command"],
              results.get("machine", "not recorded"), *files, commit=commit)  # fmt: skip
    write_readme(stem.parent, run)


def main() -> None:
    args = parse_args()
    if args.render is not None:  # re-render a run's markdown from its JSON
        results = json.loads(args.render.read_text())
        text = render(results)
        write_text_atomic(args.render.with_suffix(".md"), text)
        write_readme_of(results, args.render.with_suffix(""))
        print(text)
        return
    command = command_line()
    started, load_before = time.perf_counter(), current_load()
    rows, noise = [], {}
    pair = latency = profiled = None
    for name in args.scenarios:
        scenario = load_scenario(name).with_overrides(split=SPLIT, time="modeled", preset=args.preset)
        if pair is None:
            pair = scenario.pair.load()
            latency = (
                LatencyModel.load(args.latency) if args.latency else calibrated(pair, k_max=scenario.k_max)
            )
            if args.baseline == "profile":
                profiled = calibrated(pair, k_max=scenario.k_max, method="profile")
        found, noise[name] = scenario_rows(
            name, scenario, pair, latency, profiled, args.prompts, args.repeats, args.sim_repeats
        )
        rows += found

    results = {
        "rows": rows,
        "command": command,
        "config": {"prompts": args.prompts, "repeats": args.repeats, "sim_repeats": args.sim_repeats},
        "latency": {"kind": latency.kind, "device": latency.device, "measurement": latency.measurement},
        "baseline": None if profiled is None else {"kind": profiled.kind, "device": profiled.device},
        "pair": pair.name,
        "split": SPLIT,
        "machine": f"{platform.processor() or platform.machine()}, {latency.device}",
        "git": git_state(),
        "load_average": [load_before, current_load()],
        "seconds": round(time.perf_counter() - started),
        **summarize(rows, noise),
    }
    # the JSON first: a page that fails to render is rewritten from it with --render
    write_text_atomic(Path(args.out).with_suffix(".json"), json.dumps(results, indent=2))
    text = render(results)
    write_text_atomic(Path(args.out).with_suffix(".md"), text)
    write_readme_of(results, Path(args.out))
    print("\n" + text)


if __name__ == "__main__":
    main()
