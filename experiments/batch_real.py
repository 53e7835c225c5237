"""Batch-aware control in the real loop: continuous batching of the scenarios' test requests with
the embedded pair, every controller side by side, and the batch simulator's numbers next to them.

Each scenario's requests are drawn from its **test** prompts (``specrl.serving.scenario_requests``:
the same domains, weights and arrival process as the batch simulator), and served with
``specrl.serving.serve_continuous``: requests join the running batch when a row is free and leave
it when they finish; a fixed-batch scenario keeps its rows full while requests wait (2 requests
per row, at least 8, so that a batch of 64 runs in about a minute per controller). Time is the
batch's own device-synchronised work (steps and prefills), and requests arrive on that clock, so
every controller serves the same requests at the same arrival times; throughput is every
request's tokens over the busy seconds.

The batch-size schedule is tuned on **validation** in the batch simulator (``specrl.batch_control``,
the same machine's latency model); the policy was chosen on validation there too. The
controllers run interleaved, repeat after repeat, and each ratio to the schedule is a median over
repeats of the ratios within a repeat. The simulator's column replays the **test** traces of the
same scenario.

    python experiments/batch_real.py --policy specrl/policies/batch         # results/batch/real.*
    python experiments/batch_real.py --scenarios arrivals batch_4 --requests 6 --max-new-tokens 16 \
        --repeats 1 --episodes 1 --out /tmp/real                            # a smoke run
    python experiments/batch_real.py --policy specrl/policies/batch --scenarios batch_64 --static 1 2 \
        --only plain schedule static:1 static:2 ppo --repeats 5 --out results/batch/real_b64_static
    python experiments/batch_real.py --policy runs/batch_seed0 runs/batch_seed1 runs/batch_seed2 \
        --only ppo+cutoff --out results/batch/real_seeds    # training seeds side by side, one run

With several policies (training seeds, say) their rows are ``ppo:FOLDER`` and ``ppo:FOLDER+cutoff``
(``ppo:NAME`` for ``--policy NAME=FOLDER``), each with its own cut-off; ``--only ppo`` or
``ppo+cutoff`` picks that row of every policy.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.batch_real import controllers, policy_folders, row_names, scenario_row
from benchmarks.batch_real_page import write
from benchmarks.origin import result_origin

import specrl
from specrl.batch_control import ARRIVALS, FIXED, tune_cutoff, tune_schedule
from specrl.envs import load_scenario
from specrl.envs.batch_replay import BatchReplayEnv

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", default=[*ARRIVALS, *FIXED], help="scenarios to serve")
    parser.add_argument(
        "--requests",
        type=int,
        help="requests per scenario (default: an arrivals scenario's own; a fixed batch: 2 a row, >= 8)",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, help="tokens per request (default: each scenario's own)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats per controller")
    parser.add_argument(
        "--fixed-repeats",
        type=int,
        help="repeats of the fixed-batch scenarios (default: --repeats); they run in seconds, so more "
        "repeats buy them a steadier median cheaply",
    )
    parser.add_argument("--episodes", type=int, default=6, help="simulator episodes (tuning, sim column)")
    parser.add_argument(
        "--policy",
        nargs="+",
        default=[],
        metavar="FOLDER",
        help="exported policy folders to compare too, each FOLDER or NAME=FOLDER (rows ppo:NAME)",
    )
    parser.add_argument(
        "--static", nargs="*", type=int, default=[], metavar="K", help="static-k rows to add (static:K)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="ROW",
        help="run these rows only (plain and schedule always run: the ratios are to them)",
    )
    parser.add_argument("--out", default=str(REPO / "results" / "batch" / "real"), help="output stem")
    parser.add_argument("--render", action="store_true", help="only rewrite OUT.md and OUT.png from OUT.json")
    args = parser.parse_args(argv)
    try:
        known = row_names(args.static, args.policy)
    except ValueError as error:
        parser.error(f"--policy: {error}")
    unknown = sorted(set(args.only or ()) - known)
    if unknown:
        parser.error(f"--only {' '.join(unknown)}: no such row; the rows are {sorted(known)}")
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    if args.render:
        report = json.loads(out.with_suffix(".json").read_text())
        print(write(report, out))
        return report
    first = load_scenario(FIXED[0])
    pair = first.pair.load()
    latency = first.latency_model(pair)
    validation = {
        name: BatchReplayEnv(name, latency=latency, split="validation", pair=pair, prepare=True)
        for name in FIXED
    }
    best_k, schedule = tune_schedule(validation, args.episodes)
    print(f"schedule tuned on validation (simulator): {schedule}", flush=True)
    policies = {
        label: specrl.LearnedController.load(folder) for label, folder in policy_folders(args.policy).items()
    }
    cutoffs = {label: tune_cutoff(validation, policy, args.episodes) for label, policy in policies.items()}
    roster = controllers(schedule, policies, cutoffs, args.static, args.only)

    rows = {}
    for name in args.scenarios:
        scenario = load_scenario(name)
        fixed = not scenario.batch.arrivals
        repeats = args.fixed_repeats if fixed and args.fixed_repeats is not None else args.repeats
        rows[name] = scenario_row(
            scenario, pair, latency, roster, repeats, args.episodes, args.requests, args.max_new_tokens
        )
        print(f"{name}: real ratio vs schedule {rows[name]['ratio_vs_schedule']}", flush=True)
    report = {
        "rows": rows,
        "schedule": schedule,
        "best_k_validation": best_k,
        "cutoffs": cutoffs,
        "repeats": args.repeats,
        "policy": args.policy[0] if len(args.policy) == 1 else args.policy,
        **result_origin(pair),
    }
    print(write(report, out))
    return report


if __name__ == "__main__":
    main()
