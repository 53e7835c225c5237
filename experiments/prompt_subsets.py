"""Policies side by side in the simulator on all test prompts and on the real loop check's own.

``experiments/real_loop_check.py --prompts N`` runs the first N test prompts of each domain. When
its ranking of two policies differs from the simulator's, this tells whether the prompts or the
simulator differ: every policy on the same acceptance draws, priced by this machine's
calibration, on every test trace and on the traces of those first N prompts only.

    python experiments/prompt_subsets.py default v4=results/profiles/v4/seed0 \\
        here=results/profiles/runs/alone-cpu-xeon-2t/seed0 --first 4 --out results/real_loop/xeon_v5
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from specrl.envs import cached_traces
from specrl.evaluation.machine import machine_clause
from specrl.evaluation.profiles import policy_predict
from specrl.export import load_policy
from specrl.io import write_text_atomic
from specrl.latency import calibrated
from specrl.tables import markdown_table
from specrl.trace_evaluation import evaluate_policy
from specrl.traces import TraceSet
from specrl.training.inputs import load_scenarios, named_policies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("policy", help="the policy the others are compared with (a folder or a shipped name)")
    parser.add_argument("others", nargs="+", metavar="NAME=FOLDER", help="the policies beside it")
    parser.add_argument("--scenarios", nargs="+", default=["code", "prose", "math", "mixed"])
    parser.add_argument("--first", type=int, default=4, help="the real loop check's --prompts")
    parser.add_argument("--repeats", type=int, default=4, help="acceptance draws per sampled trace")
    parser.add_argument("--out", type=Path, required=True, help="folder of prompt_subsets.{md,json}")
    args = parser.parse_args()
    others = named_policies(parser, "others", args.others, reserved=("policy",))
    started = time.perf_counter()
    policies = {"policy": load_policy(args.policy), **{n: load_policy(f) for n, f in others.items()}}
    scenarios = load_scenarios(args.scenarios, None)
    pair = scenarios[0].pair.load()
    latency = calibrated(pair)
    rows, record = [], []
    for scenario in scenarios:
        test = cached_traces(scenario, "test", pair)
        subsets = {
            "all": test,
            f"first {args.first}": TraceSet.from_traces(
                [t for t in test.traces if t.prompt_index < args.first], test.meta
            ),
        }
        for label, traces in subsets.items():
            tokens = {
                name: evaluate_policy(
                    policy_predict(policy),
                    scenario,
                    traces,
                    latency.for_sampling(scenario.sampling),
                    args.repeats,
                    predictor=policy.predictor,
                ).tokens_per_s
                for name, policy in policies.items()
            }
            ratios = {name: tokens["policy"] / tokens[name] for name in others}
            rows.append(
                [scenario.name, label, str(len(traces)), *(f"{tokens[n]:.1f}" for n in policies)]
                + [f"{ratios[n]:.3f}" for n in others]
            )
            record.append(
                {"scenario": scenario.name, "prompts": label, "traces": len(traces), "tokens_per_s": tokens}
            )
    header = ["scenario", "test prompts", "traces", *(f"{n} tokens/s" for n in policies)]
    header += [f"policy / {n}" for n in others]
    command = "python " + shlex.join(sys.argv)
    text = (
        "# Policies on all test prompts and on the real loop check's, simulator\n\n"
        f"`policy` is {args.policy}. Every policy on the same acceptance draws ({args.repeats} per sampled "
        "trace), priced by this machine's calibration; the real loop check runs the first "
        f"{args.first} test prompts of each domain.\n\n{markdown_table(header, rows)}\n\n"
        f"Command: `{command}` ({(time.perf_counter() - started) / 60:.1f} minutes). "
        f"Machine: {machine_clause(latency.device)}.\n"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "prompt_subsets.md", text)
    write_text_atomic(
        args.out / "prompt_subsets.json", json.dumps({"command": command, "rows": record}, indent=2)
    )
    print(text)


if __name__ == "__main__":
    main()
