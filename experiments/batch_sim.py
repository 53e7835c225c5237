"""Batch-aware control in the batch simulator: the vLLM / TensorRT-LLM batch-size schedule, tuned
on validation, against plain decoding, every static k, the rules, and a learned policy, on test.

The batch simulator (``specrl/BatchReplay-v0``) replays every row's own trace with the pair's
batched latency model, measured on this machine (``specrl.latency.batch``). The schedule is
tuned the way a serving engineer tunes it: at each fixed batch size (``batch_1``, ``batch_4``,
``batch_16``, ``batch_64``), the k with the highest throughput on the **validation** traces;
between measured sizes the k of the nearer one (geometrically); 0 above the last size where a
k > 0 wins. Every controller is then run on the **test** traces of every scenario, fixed and
``arrivals`` (requests arriving at a rate that changes), with the same seeds, so the same
requests, arrivals and draws. Throughput: tokens of every request over the batch's busy seconds.
"Best static" is the best k on the test traces themselves, a bound in hindsight. "Clairvoyant"
knows each step's outcomes before it acts (``BatchReplayEnv.preview``) and takes the k that
maximises tokens minus lambda x seconds, lambda its own throughput at the batch's size (three
Dinkelbach rounds): not
a proof of optimality over a batch's joint future, but what per-step knowledge is worth; no
controller that sees only the past should come near it.

    python experiments/batch_sim.py                                  # results/batch/sim.{json,md}
    python experiments/batch_sim.py --policy specrl/policies/batch   # with a learned policy
    python experiments/batch_sim.py --episodes 1 --out /tmp/batch_sim   # quicker
    python experiments/batch_sim.py --latency-profile gpu-like-h200 --policy specrl/policies/batch \\
        --out results/profiles/batch/gpu-like-h200   # under a held-out machine of the family
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tqdm.auto import tqdm

import specrl
from specrl.batch_control import (
    ARRIVALS,
    FIXED,
    clairvoyant,
    controller_throughput,
    tune_cutoff,
    tune_schedule,
    with_cutoff,
)
from specrl.batch_control.schedule import cutoff_sentence
from specrl.controllers.batch_schedule import BatchScheduleController
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
    parser.add_argument("--fixed", nargs="+", default=FIXED, help="fixed-batch scenarios (tune the schedule)")
    parser.add_argument("--arrivals", nargs="*", default=ARRIVALS, help="scenarios with a varying load")
    parser.add_argument("--episodes", type=int, default=3, help="episodes (seeds 0..N-1) per controller")
    parser.add_argument("--policy", help="an exported policy folder to compare too")
    parser.add_argument(
        "--latency-profile",
        default=None,
        choices=profiles_known(batch=True),
        help="price with this batch profile of the latency family (specrl.latency.family; default: "
        "this machine's batch calibration)",
    )
    parser.add_argument("--out", default=str(REPO / "results" / "batch" / "sim"), help="output stem")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    first = load_scenario(args.fixed[0])
    pair = first.pair.load()
    if args.latency_profile is None:
        latency = first.latency_model(pair)
    else:
        latency = batch_profiles_of(batch=True)[args.latency_profile]
    ks = list(range(first.k_max + 1))
    envs = {
        (name, split): BatchReplayEnv(name, latency=latency, split=split, pair=pair, prepare=True)
        for name in [*args.fixed, *args.arrivals]
        for split in ("validation", "test")
    }
    best_k, schedule = tune_schedule({name: envs[(name, "validation")] for name in args.fixed}, args.episodes)
    controllers = {
        "plain": specrl.StaticController(0),
        "schedule": BatchScheduleController(schedule),
        "tcp": specrl.TCPController(),
        "hf-heuristic": specrl.HFHeuristicController(),
    }
    cutoff = None
    if args.policy:
        controllers["ppo"] = specrl.LearnedController.load(args.policy)
        fixed = {name: envs[(name, "validation")] for name in args.fixed}
        cutoff = tune_cutoff(fixed, controllers["ppo"], args.episodes)
        controllers = with_cutoff(controllers, cutoff)
    rows = {}
    for name in tqdm([*args.fixed, *args.arrivals], desc="test"):
        env = envs[(name, "test")]
        static = {k: controller_throughput(env, specrl.StaticController(k), args.episodes) for k in ks}
        measured = {label: controller_throughput(env, c, args.episodes) for label, c in controllers.items()}
        rows[name] = {
            "controllers": measured,
            "static": {str(k): v for k, v in static.items()},
            "best_static_k": max(static, key=static.get),
            "clairvoyant": clairvoyant(env, controllers["schedule"], args.episodes),
        }
    report = {
        "rows": rows,
        "best_k_validation": best_k,
        "schedule": schedule,
        "cutoff": cutoff,
        "episodes": args.episodes,
        "policy": args.policy,
        "latency": {
            "device": latency.device,
            "profile": args.latency_profile,
            "verify_scale": None if latency.verify_scale is None else latency.verify_scale.tolist(),
        },
        **result_origin(pair),
    }
    out = Path(args.out)
    write_report(out, report, markdown(report))
    print(markdown(report))
    return report


def priced_by(report: dict) -> str:
    profile = report["latency"].get("profile")
    if profile is None:
        return "this machine's batched latency model"
    return f"the batch latency profile `{profile}` (specrl.latency.family)"


def markdown(report: dict) -> str:
    labels = list(next(iter(report["rows"].values()))["controllers"])
    lines = [
        "# Batch-aware control in the batch simulator (test traces)",
        "",
        f"Tokens per busy second over {report['episodes']} episodes per scenario (the same requests, "
        f"arrivals and draws for every controller), modeled with {priced_by(report)}. The "
        f"schedule was tuned on validation: best k per batch size {report['best_k_validation']} -> "
        f"`{report['schedule']}` (k up to each batch size, 0 above the last).{cutoff_sentence(report)}",
        "",
    ]
    others = [label for label in labels if label != "schedule"]
    header = [
        "scenario",
        *labels,
        "best static (k)",
        "clairvoyant",
        *[f"{label} / schedule" for label in [*others, "clairvoyant"]],
    ]
    table = []
    for name, row in report["rows"].items():
        c = row["controllers"]
        best = row["static"][str(row["best_static_k"])]
        table.append(
            [
                name,
                *[f"{c[label]:.0f}" for label in labels],
                f"{best:.0f} ({row['best_static_k']})",
                f"{row['clairvoyant']:.0f}",
                *[f"{c[label] / c['schedule']:.3f}" for label in others],
                f"{row['clairvoyant'] / c['schedule']:.3f}",
            ]
        )
    lines += [markdown_table(header, table), ""]
    lines += [
        origin_line(report),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
