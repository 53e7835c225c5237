"""How far an imitation label must look: the regret of every k, played out over 1 to all steps.

``train_batch.py`` labels the states it visits with ``specrl.batch_control.RolloutOracle``: each k is taken
on a fork of the episode, then the schedule (tuned on validation) plays on, and the k's regret is
how much less than the best k that run gains (tokens - lam x seconds, prefill included, in plain
steps' worth). This script follows the schedule through one validation episode per scenario,
labels one state in ``--every`` at each horizon, and tabulates the mean regret of each k and the
k a causal policy fit to those labels would take everywhere (the least mean regret), beside
each static k's throughput over plain decoding on the same episode. Where the horizons disagree,
a short look-ahead teaches the wrong k.

    python experiments/label_horizon.py          # results/batch/labels.{json,md}
    python experiments/label_horizon.py --every 32 --horizons 1 16 --out /tmp/labels   # quicker
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

import specrl  # noqa: E402
from specrl.batch_control import (
    ARRIVALS,
    FIXED,
    RolloutOracle,
    controller_throughput,
    rates_by_batch,
    tune_schedule,
)
from specrl.controllers.batch_schedule import BatchScheduleController  # noqa: E402
from specrl.envs import load_scenario  # noqa: E402
from specrl.envs.batch_replay import BatchReplayEnv  # noqa: E402
from specrl.evaluation.machine import origin_line, result_origin  # noqa: E402
from specrl.io import write_report  # noqa: E402
from specrl.tables import markdown_table  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
TO_THE_END = 1_000_000  # a horizon no episode reaches


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", default=[*FIXED, *ARRIVALS])
    parser.add_argument(
        "--horizons", type=int, nargs="+", default=[1, 16, 64, 256, TO_THE_END], help="steps played out"
    )
    parser.add_argument("--every", type=int, default=16, help="label one visited state in this many")
    parser.add_argument("--out", default=str(REPO / "results" / "batch" / "labels"), help="output stem")
    return parser.parse_args(argv)


def mean_regrets(env: BatchReplayEnv, schedule, horizons: list[int], every: int) -> dict[int, list[float]]:
    """Horizon -> each k's mean regret over the labelled states of the schedule's episode (seed 0)."""
    rates = rates_by_batch(env, schedule, 1)
    oracles = {h: RolloutOracle(env, rates, schedule, h) for h in horizons}
    labels: dict[int, list[np.ndarray]] = {h: [] for h in horizons}
    observation, _ = env.reset(seed=0)
    done, step = False, 0
    while not done:
        if step % every == 0:
            for h, oracle in oracles.items():
                labels[h].append(oracle.regrets()[:, 0])
        observation, _, done, _, _ = env.step(schedule.act(observation))
        step += 1
    return {h: np.mean(labels[h], axis=0).tolist() for h in horizons}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    first = load_scenario(args.scenarios[0])
    pair = first.pair.load()
    latency = first.latency_model(pair)
    envs = {
        name: BatchReplayEnv(name, latency=latency, split="validation", pair=pair, prepare=True)
        for name in args.scenarios
    }
    fixed = {name: env for name, env in envs.items() if name in FIXED}
    _, table = tune_schedule(fixed, 1)
    schedule = BatchScheduleController(table)
    rows = {}
    for name, env in tqdm(envs.items(), desc="label horizons"):
        plain = controller_throughput(env, specrl.StaticController(0), 1)
        static = [
            controller_throughput(env, specrl.StaticController(k), 1) / plain
            for k in range(env.scenario.k_max + 1)
        ]
        rows[name] = {
            "regrets": mean_regrets(env, schedule, args.horizons, args.every),
            "static_vs_plain": static,
            "schedule_vs_plain": controller_throughput(env, schedule, 1) / plain,
        }
    report = {"rows": rows, "schedule": table, "every": args.every, "horizons": args.horizons}
    report.update(result_origin(pair))
    write_report(Path(args.out), report, markdown(report))
    print(markdown(report))
    return report


def horizon_name(horizon: int) -> str:
    return "to the end" if horizon >= TO_THE_END else str(horizon)


def markdown(report: dict) -> str:
    k_count = len(next(iter(report["rows"].values()))["static_vs_plain"])
    lines = [
        "# How far an imitation label must look (validation traces)",
        "",
        "Mean regret of each k over the states the schedule visits (one in "
        f"{report['every']}, one episode per scenario, seed 0), in plain steps' worth: each k is "
        f"taken on a fork of the episode, then the schedule `{report['schedule']}` plays the given "
        "number of steps (`specrl.batch_control.RolloutOracle`). *Policy's k*: the least mean regret, "
        "the k a causal policy fit to those labels takes where it cannot tell the states apart. The last "
        "row of each scenario is each static k's throughput over plain decoding on the same "
        "episode, and the schedule's.",
        "",
    ]
    header = ["scenario", "horizon (steps)", "policy's k", *[f"k={k}" for k in range(k_count)]]
    table = []
    for name, row in report["rows"].items():
        for horizon, regrets in row["regrets"].items():
            best = int(np.argmin(regrets))
            cells = [f"**{r:.2f}**" if k == best else f"{r:.2f}" for k, r in enumerate(regrets)]
            table.append([name, horizon_name(int(horizon)), best, *cells])
        static = row["static_vs_plain"]
        table.append(
            [name, f"static k / plain (schedule {row['schedule_vs_plain']:.3f})", int(np.argmax(static))]
            + [f"{s:.3f}" for s in static]
        )
    lines += [markdown_table(header, table), "", origin_line(report), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
