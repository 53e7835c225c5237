"""An exported policy against the bar in the real loop, powered: as many test prompts and repeats
as asked, with the 95% interval of each paired ratio.

The same check ``train_ppo.py`` ends with (:mod:`specrl.evaluation.real_loop_check`): every rule of
each scenario's bar (the rules tuned on validation traces, the best static setting in hindsight on
its test traces) and the policy, every controller on each test prompt in a seeded random order per
repeat, the machine's drift cancelled by pairing within a repeat. Its own run is sized for minutes
(2 prompts x 2 repeats); this one is sized to resolve a margin of a few percent.

    python experiments/real_loop_check.py --policy default --scenarios code prose math \\
        --prompts 8 --repeats 4 --out results/real_loop/epyc
    python experiments/real_loop_check.py --policy default --versus here=FOLDER ...  # two policies
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.result_folder import write_result

from specrl.controllers.learned import LearnedController
from specrl.evaluation.real_loop_check import check_scenarios, real_loop_section
from specrl.provenance import command_line, machine_clause
from specrl.training.comparison import Comparison
from specrl.training.inputs import load_scenarios, named_policies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policy", default="default", help="a shipped policy's name or a policy folder")
    parser.add_argument("--scenarios", nargs="+", default=["code", "prose", "math"])
    parser.add_argument("--prompts", type=int, default=8, help="test prompts per domain")
    parser.add_argument("--repeats", type=int, default=4, help="interleaved repeats (>= 2 for an interval)")
    parser.add_argument(
        "--sim-repeats", type=int, default=4, help="acceptance draws per trace when tuning rules"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--versus",
        nargs="*",
        default=[],
        metavar="NAME=POLICY",
        help="other policies run alongside (a name for the table, then a shipped name or a folder)",
    )
    parser.add_argument("--out", type=Path, required=True, help="folder of real_loop.md and real_loop.json")
    args = parser.parse_args()
    if args.prompts < 1 or args.repeats < 2:
        parser.error("--prompts must be >= 1 and --repeats >= 2 (an interval needs two repeats)")
    started = time.perf_counter()
    versus = {
        name: LearnedController.load(where)
        for name, where in named_policies(parser, "--versus", args.versus).items()
    }
    policy = LearnedController.load(args.policy)
    scenarios = load_scenarios(args.scenarios, None)
    comparison = Comparison.for_policy(policy, scenarios, args.sim_repeats)
    latency = comparison.latency
    rows = check_scenarios(
        args.scenarios,
        comparison,
        {},
        policy,
        preset=None,
        prompts=args.prompts,
        repeats=args.repeats,
        seed=args.seed,
        versus=versus,
    )
    command = command_line()
    text = (
        f"# `{args.policy}` against the best rule, real loop\n"
        + real_loop_section(rows, args.prompts, args.repeats, list(versus))
        + f"\nCommand: `{command}` ({(time.perf_counter() - started) / 60:.1f} minutes). Machine: "
        f"{machine_clause(latency.device)}.\n"
    )
    record = {
        "command": command,
        "policy": str(policy.policy.folder),
        "versus": {name: str(other.policy.folder) for name, other in versus.items()},
        "prompts": args.prompts,
        "repeats": args.repeats,
        "rows": {
            name: {
                "tokens_per_s": row.tokens_per_s,
                "paired": row.paired,
                "ci95": {role: interval.ci95() for role, interval in row.intervals.items()},
                "n": args.repeats,
                "best_rule": row.best_rule(),
                "tokens_per_s_repeats": row.repeats,
                "versus_to_best_rule": {
                    name: {"ratio": (interval := row.to_best_rule(name)).ratio, "ci95": interval.ci95()}
                    for name in versus
                },
            }
            for name, row in rows.items()
        },
    }
    measured = (
        f"The policy `{args.policy}` against every rule of the bar in the real loop: {args.prompts} "
        f"test prompts per domain of {', '.join(args.scenarios)}, {args.repeats} interleaved repeats, "
        "paired ratios with their 95% interval"
        + (f"; alongside, {', '.join(args.versus)}." if args.versus else ".")
    )
    write_result(
        args.out,
        "real_loop",
        text,
        record,
        title=f"`{args.policy}` against the best rule, real loop: `{args.out.name}`",
        measured=measured,
        command=command,
        machine=machine_clause(latency.device),
    )
    print(text)


if __name__ == "__main__":
    main()
