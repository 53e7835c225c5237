"""How many validation episodes the batch-size schedule needs: the schedule tuned on the first N
episodes, for several N, under batch latency profiles of the family.

``batch_sim.py`` and ``batch_real.py`` tune the schedule (the best static k at each fixed batch
size, on validation traces) on ``--episodes`` episodes. Where two k are within a fraction of a
percent at one size, few episodes can pick the other, and a schedule off at 64 rows moves every
ratio on arrivals. This plays every static k once over the largest N episodes and pools the first
N of them, so each N sees the same episodes as a run with ``--episodes N``.

    python experiments/schedule_episodes.py     # results/batch/schedule_episodes.{json,md}
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tqdm.auto import tqdm

import specrl
from specrl.batch_control import FIXED, batch_of, play_episodes, pooled_throughput
from specrl.controllers.batch_schedule import schedule_from_best_k
from specrl.envs import load_scenario
from specrl.envs.batch_replay import BatchReplayEnv
from specrl.evaluation.machine import origin_line, result_origin
from specrl.io import write_report
from specrl.latency.family import profiles as batch_profiles_of
from specrl.latency.family import profiles_known
from specrl.tables import markdown_table

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    known = profiles_known(batch=True)
    parser.add_argument("--profiles", nargs="+", default=["cpu-xeon-2t", "gpu-like-h200"], choices=known)
    parser.add_argument("--episodes", nargs="+", type=int, default=[3, 6, 12], help="the N to compare")
    parser.add_argument("--fixed", nargs="+", default=FIXED, help="fixed-batch scenarios (as batch_sim.py's)")
    parser.add_argument(
        "--out", default=str(REPO / "results" / "batch" / "schedule_episodes"), help="output stem"
    )
    args = parser.parse_args(argv)
    if min(args.episodes) < 1:
        parser.error("--episodes: each N must be at least 1")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    pair = load_scenario(args.fixed[0]).pair.load()
    models = batch_profiles_of(batch=True)
    most = max(args.episodes)
    rows = []
    for profile in args.profiles:
        speeds: dict[int, dict[int, dict[int, float]]] = {n: {} for n in args.episodes}  # N -> B -> k
        for name in tqdm(args.fixed, desc=profile):
            env = BatchReplayEnv(name, latency=models[profile], split="validation", pair=pair, prepare=True)
            for k in range(env.scenario.k_max + 1):
                tallies = play_episodes(env, specrl.StaticController(k), most)
                for n in args.episodes:
                    speeds[n].setdefault(batch_of(name), {})[k] = pooled_throughput(tallies[:n])
        for n in args.episodes:
            best_k = {size: max(by_k, key=by_k.get) for size, by_k in speeds[n].items()}
            rows.append(
                {
                    "profile": profile,
                    "episodes": n,
                    "best_k": {str(size): k for size, k in best_k.items()},
                    "schedule": str(schedule_from_best_k(best_k)),
                    "speeds": {  # tokens/s by batch size, then k
                        str(size): {str(k): v for k, v in by_k.items()} for size, by_k in speeds[n].items()
                    },
                }
            )
    report = {"rows": rows, **result_origin(pair)}
    write_report(Path(args.out), report, markdown(report))
    print(markdown(report))
    return report


def runner_up(by_k: dict) -> str:
    """The best k and how much slower the next best is: ``1 (k = 0 -0.7%)``."""
    ranked = sorted(by_k, key=by_k.get, reverse=True)
    best, second = ranked[0], ranked[1]
    return f"{best} (k = {second} {by_k[second] / by_k[best] - 1:+.1%})"


def markdown(report: dict) -> str:
    sizes = sorted({size for row in report["rows"] for size in row["speeds"]}, key=int)
    table = [
        [
            row["profile"],
            str(row["episodes"]),
            *[runner_up(row["speeds"][size]) for size in sizes],
            f"`{row['schedule']}`",
        ]
        for row in report["rows"]
    ]
    header = ["profile", "episodes", *[f"best k at {size} rows (the next)" for size in sizes], "schedule"]
    return "\n".join(
        [
            "# How many validation episodes the batch-size schedule needs",
            "",
            "The schedule tuned on the first N validation episodes of each fixed batch size, in the "
            "batch simulator under each profile: the best static k at each size, the next best k "
            "and how much slower it is, and the schedule they make (k up to each batch size, 0 above "
            "the last).",
            "",
            markdown_table(header, table),
            "",
            origin_line(report),
            "",
        ]
    )


if __name__ == "__main__":
    main()
