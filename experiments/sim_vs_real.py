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
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

from specrl.controllers import Controller, HFHeuristicController, StaticController, TCPController
from specrl.engine.types import GenerationStats
from specrl.envs import EpisodeSummary, SpecDecodeEnv, cached_traces, load_scenario
from specrl.evaluation.compare import compare
from specrl.io import write_text_atomic
from specrl.latency import LatencyModel, calibrated
from specrl.tables import markdown_table
from specrl.traces import TraceSet
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
SPLIT = "test"


def subset(traces: TraceSet, count: int) -> TraceSet:
    """The first ``count`` traces of each domain."""
    keep, seen = [], {}
    for trace in traces.traces:
        seen[trace.domain] = seen.get(trace.domain, 0) + 1
        if seen[trace.domain] <= count:
            keep.append(trace)
    return TraceSet.from_traces(keep, traces.meta)


def add_step(totals: EpisodeSummary, result, draft_seconds: float, verify_seconds: float) -> None:
    totals.add(
        GenerationStats(
            result.emitted, 1, 0.0, draft_seconds, verify_seconds, result.proposed, result.accepted
        )
    )


def play_priced(env: SpecDecodeEnv, make: Callable[[], Controller], trace, seed: int):
    """A fresh controller on ``trace``'s prompt with reset seed ``seed``: the (modeled, wall-clock)
    totals of the same real steps, priced by ``env.latency`` and by the device clock."""
    controller = make()
    observation, _ = env.reset(
        seed=seed, options={"domain": trace.domain, "prompt_index": trace.prompt_index}
    )
    controller.reset()
    modeled, wallclock = EpisodeSummary(), EpisodeSummary()
    done = False
    while not done:
        observation, _, done, _, info = env.step(controller.act(observation))
        result = info["step_result"]
        controller.observe(result)
        add_step(modeled, result, *env.latency.seconds(result))
        add_step(wallclock, result, result.draft_seconds, result.verify_seconds)
    return modeled, wallclock


def run_real(
    env: SpecDecodeEnv, traces: TraceSet, repeats: int
) -> tuple[dict[str, tuple[EpisodeSummary, EpisodeSummary]], list[float]]:
    """label -> (modeled, wall-clock) totals of each controller over the traces' episodes, and
    every episode's modeled / wall-clock seconds in run order.

    The controllers take turns on each episode (same prompt, same seed: the trace's, + 100,000 per
    repeat), in a fixed order, after one untimed warm-up episode each on the first trace
    (:func:`~specrl.evaluation.compare.compare`), so slow phases of the machine hit them alike.
    ``env.latency`` (the scenario's sampling mode) prices the modeled column. The per-episode
    ratios measure the machine's own noise: the same model on the same steps.
    """
    trials = compare(
        {
            label: (lambda trace, seed, make=make: play_priced(env, make, trace, seed))
            for label, make in CONTROLLERS.items()
        },
        traces.traces,
        1 if traces.greedy else repeats,
        seed=lambda trace, repeat, index: trace.seed + 100_000 * repeat,
        warmup=1,
    )
    totals = {label: (EpisodeSummary(), EpisodeSummary()) for label in CONTROLLERS}
    for trial in trials:
        for total, episode in zip(totals[trial.player], trial.record, strict=True):
            total.add(episode)
    episode_ratios = [
        modeled.seconds / wallclock.seconds for modeled, wallclock in (t.record for t in trials)
    ]
    return totals, episode_ratios


def machine_noise(episode_ratios: list[float], controllers: int) -> dict[str, float]:
    """How much the wall clock moves on its own: the relative standard deviation of modeled /
    wall-clock seconds over episodes (one model, so only the machine varies), and the standard
    error that leaves on one controller's total over its share of the episodes. A sim / wall gap
    within about twice that error cannot be told from the machine's noise."""
    logs = np.log(np.asarray(episode_ratios))
    spread = float(np.std(logs, ddof=1)) if len(logs) > 1 else float("nan")
    per_controller = max(1, len(logs) // controllers)
    half = len(logs) // 2
    return {
        "episodes": len(logs),
        "episode_sd": spread,
        "controller_se": spread / np.sqrt(per_controller),
        "second_half_vs_first": float(np.exp(logs[half:].mean() - logs[:half].mean()) - 1)
        if half
        else float("nan"),
    }


def gap(a: float, b: float) -> float:
    return a / b - 1 if b > 0 else float("nan")


def table(rows: list[dict], baseline: bool) -> str:
    """Markdown: per scenario and controller, tokens/sec in the simulator and on the wall clock, the
    gaps, and the acceptance rates."""
    header = ["scenario", "controller", "sim tok/s", "real wall-clock tok/s", "**sim / wall**"]
    header += ["modeled / wall", "sim / modeled"]
    header += ["profiled sim / wall"] if baseline else []
    header += ["sim accept", "real accept"]
    lines = []
    for row in rows:
        sim, modeled, wall = (row[k]["tokens_per_s"] for k in ("sim", "real_modeled", "real_wallclock"))
        cells = [
            row["scenario"],
            row["controller"],
            f"{sim:.1f}",
            f"{wall:.1f}",
            f"**{gap(sim, wall):+.1%}**",
            f"{gap(modeled, wall):+.1%}",
            f"{gap(sim, modeled):+.1%}",
        ]
        if baseline:
            cells.append(f"{gap(row['sim_baseline']['tokens_per_s'], wall):+.1%}")
        cells += [f"{row['sim']['acceptance_rate']:.3f}", f"{row['real_wallclock']['acceptance_rate']:.3f}"]
        lines.append(cells)
    return markdown_table(header, lines)


def worst_gaps(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per scenario, the largest |gap| over controllers of each comparison, and its split into a
    level (the median over controllers of sim / wall - 1: one factor for every controller, e.g.
    the machine running slower or faster than when it was calibrated) and a shape (the largest
    |(sim / wall) / (1 + level) - 1|: what the model gets wrong between controllers)."""
    columns = {"sim_wall": ("sim", "real_wallclock"), "modeled_wall": ("real_modeled", "real_wallclock")}
    columns["sim_modeled"] = ("sim", "real_modeled")
    if all("sim_baseline" in row for row in rows):
        columns["profiled_sim_wall"] = ("sim_baseline", "real_wallclock")
    result: dict[str, dict[str, float]] = {}
    for scenario in dict.fromkeys(row["scenario"] for row in rows):
        mine = [row for row in rows if row["scenario"] == scenario]
        entry = result[scenario] = {}
        for key, (top, bottom) in columns.items():
            ratios = np.array([row[top]["tokens_per_s"] / row[bottom]["tokens_per_s"] for row in mine])
            entry[key] = float(np.abs(ratios - 1).max())
            if key in ("sim_wall", "profiled_sim_wall"):
                level = float(np.median(ratios))
                entry[f"{key}_level"] = level - 1
                entry[f"{key}_shape"] = float(np.abs(ratios / level - 1).max())
    return result


def rankings(rows: list[dict]) -> dict[str, dict]:
    """Per scenario: whether the simulator orders the controllers as the real loop does."""
    by_scenario: dict[str, list] = {}
    for row in rows:
        by_scenario.setdefault(row["scenario"], []).append(
            (row["controller"], *(row[k]["tokens_per_s"] for k in ("sim", "real_modeled", "real_wallclock")))
        )
    result = {}
    for scenario, entries in by_scenario.items():
        order = [[e[0] for e in sorted(entries, key=lambda e: -e[i])] for i in (1, 2, 3)]
        # ties share the mean of their ranks
        spearman = spearmanr([e[1] for e in entries], [e[3] for e in entries]).statistic
        result[scenario] = {
            "modeled": order[0] == order[1],
            "wallclock": order[0] == order[2],
            "spearman_wallclock": float(spearman),
        }
    return result


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
    parser.add_argument("--out", default="results/sim_vs_real", help="output stem (.json and .md are added)")
    parser.add_argument(
        "--render", type=Path, default=None, metavar="JSON", help="only rewrite the .md of a run's JSON"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.render is not None:  # re-render a run's markdown from its JSON
        text = render(json.loads(args.render.read_text()))
        write_text_atomic(args.render.with_suffix(".md"), text)
        print(text)
        return
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    started, load_before = time.perf_counter(), os.getloadavg()[0]
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
        traces = subset(cached_traces(scenario, SPLIT, pair), args.prompts)
        env = SpecDecodeEnv(scenario, pair=pair, split=SPLIT, time="wallclock", latency=latency)
        real, episode_ratios = run_real(env, traces, args.repeats)
        noise[name] = machine_noise(episode_ratios, len(CONTROLLERS))
        for label, make in CONTROLLERS.items():
            sim = evaluate_controller(make(), scenario, traces, latency, repeats=args.sim_repeats)
            modeled, wallclock = real[label]
            row = {
                "scenario": name,
                "controller": label,
                "sim": sim.to_dict(),
                "real_modeled": modeled.to_dict(),
                "real_wallclock": wallclock.to_dict(),
            }
            if profiled is not None:
                baseline = evaluate_controller(make(), scenario, traces, profiled, repeats=args.sim_repeats)
                row["sim_baseline"] = baseline.to_dict()
            rows.append(row)
            print(
                f"{name:>10} {label:>20}: sim {sim.tokens_per_s:7.1f}  real modeled "
                f"{modeled.tokens_per_s:7.1f}  wall clock {wallclock.tokens_per_s:7.1f} tokens/s "
                f"(sim / wall {gap(sim.tokens_per_s, wallclock.tokens_per_s):+.1%})",
                flush=True,
            )

    results = {
        "rows": rows,
        "command": command,
        "config": {"prompts": args.prompts, "repeats": args.repeats, "sim_repeats": args.sim_repeats},
        "latency": {"kind": latency.kind, "device": latency.device, "measurement": latency.measurement},
        "baseline": None if profiled is None else {"kind": profiled.kind, "device": profiled.device},
        "pair": pair.name,
        "split": SPLIT,
        "machine": f"{platform.processor() or platform.machine()}, {latency.device}",
        "load_average": [load_before, os.getloadavg()[0]],
        "seconds": round(time.perf_counter() - started),
    }
    results["worst"] = worst_gaps(rows)
    results["noise"] = noise
    results["worst_sim_wall_gap"] = max(entry["sim_wall"] for entry in results["worst"].values())
    results["ranking"] = rankings(rows)
    write_text_atomic(Path(args.out).with_suffix(".json"), json.dumps(results, indent=2))
    text = render(results)
    write_text_atomic(Path(args.out).with_suffix(".md"), text)
    print("\n" + text)


def render(results: dict) -> str:
    """The markdown page of a run's JSON."""
    worst, config = results["worst"], results["config"]
    with_baseline = results["baseline"] is not None
    titles = ["scenario", "max \\|sim / wall - 1\\|", "level", "shape", "max \\|modeled / wall - 1\\|"]
    titles += ["max \\|sim / modeled - 1\\|"]
    titles += ["profiled: max \\|sim / wall - 1\\|", "level", "shape"] if with_baseline else []
    noise = results.get("noise", {})
    titles += ["machine noise per episode", "2 x its standard error per controller"] if noise else []
    summary = []
    for scenario, entry in worst.items():
        keys = ["sim_wall", "sim_wall_level", "sim_wall_shape", "modeled_wall", "sim_modeled"]
        keys += (
            ["profiled_sim_wall", "profiled_sim_wall_level", "profiled_sim_wall_shape"]
            if with_baseline
            else []
        )
        cells = [scenario] + [f"{entry[k]:+.1%}" if k.endswith("level") else f"{entry[k]:.1%}" for k in keys]
        if noise:
            cells += [f"{noise[scenario]['episode_sd']:.1%}", f"{2 * noise[scenario]['controller_se']:.1%}"]
        summary.append(cells)
    ranks = ", ".join(f"{s}: {v['spearman_wallclock']:.2f}" for s, v in results["ranking"].items())
    load = results["load_average"]
    lines = [
        f"Simulator vs real loop, pair `{results['pair']}`, {results['split']} prompts ({config['prompts']} "
        f"per domain; sampled scenarios: {config['repeats']} real seeds and {config['sim_repeats']} "
        f"simulated draws per trace). Latency model: {results['latency']['kind']}"
        + (f"; baseline: {results['baseline']['kind']}." if with_baseline else "."),
        "",
        "Level: the median over controllers of sim / wall - 1 (one factor for all controllers: the machine "
        "slower or faster than when calibrated). Shape: the largest |(sim / wall) / (1 + level) - 1| (what "
        "the model gets wrong between controllers)."
        + (
            " Machine noise: the standard deviation over real episodes of modeled / wall-clock seconds "
            "(one model on the very steps it prices, so only the machine varies); a controller's gap "
            "within twice its standard error cannot be told from that noise."
            if noise
            else ""
        ),
        "",
        markdown_table(titles, summary),
        "",
        f"Largest |sim / wall clock - 1| over all rows: {results['worst_sim_wall_gap']:.1%}. Rank "
        f"correlation of the controllers (simulator vs wall clock, Spearman): {ranks}.",
        "",
        table(results["rows"], with_baseline),
        "",
        f"Machine: {results['machine']}; load average {load[0]:.2f} at the start, {load[1]:.2f} at the end "
        f"(this run keeps about 2 busy itself). Command: `{results['command']}` "
        f"({results['seconds']} s).",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
