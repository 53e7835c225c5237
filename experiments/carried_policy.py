"""A policy carried to a pair it never saw, against one trained on that pair, in the simulator: per
scenario, on the pair's test traces (modeled time, this machine's calibration of the pair), plain
decoding, every rule of the bar (the rules tuned on validation traces, the best static setting in
hindsight on the test traces), the carried policy and the trained one, all on the same acceptance
draws. The real loop's paired intervals come from ``experiments/real_loop_check.py --policy TRAINED
--versus carried=CARRIED`` beside it.

    python experiments/carried_policy.py --carried default --trained runs/<run>/policy \\
        --scenarios smollm2 smollm2_code smollm2_prose smollm2_reasoning --out results/smollm2/carried
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchmarks.result_folder import write_result

from specrl.controllers.learned import LearnedController
from specrl.envs import cached_traces
from specrl.provenance import command_line, machine_clause
from specrl.tables import markdown_table
from specrl.trace_evaluation import evaluate_controller
from specrl.training.comparison import BEST_STATIC, PLAIN, Comparison, best_rule_role
from specrl.training.inputs import load_scenarios

CARRIED, TRAINED = "carried", "trained"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--carried", default="default", help="the policy carried over (a shipped name or folder)"
    )
    parser.add_argument("--trained", required=True, help="the policy trained on this pair (a folder or name)")
    parser.add_argument("--scenarios", nargs="+", required=True, help="scenarios of the pair")
    parser.add_argument("--sim-repeats", type=int, default=4, help="acceptance draws per sampled trace")
    parser.add_argument("--out", type=Path, required=True, help="folder of carried.md and carried.json")
    args = parser.parse_args()
    started = time.perf_counter()
    policies = {CARRIED: LearnedController.load(args.carried), TRAINED: LearnedController.load(args.trained)}
    trained = policies[TRAINED]
    scenarios = load_scenarios(args.scenarios, None)
    comparison = Comparison.for_policy(trained, scenarios, args.sim_repeats)
    pair, latency = comparison.pair, comparison.latency
    rows = {}
    for scenario in scenarios:
        test = cached_traces(scenario, "test", pair)
        tokens_per_s, bar = comparison.rules_on(scenario, test)
        best = best_rule_role(tokens_per_s)
        chose = {}
        for name, policy in policies.items():
            summary = evaluate_controller(policy, scenario, test, latency, args.sim_repeats)
            tokens_per_s[name] = summary.tokens_per_s
            chose[name] = {"mean_k": summary.mean_k, "acceptance_rate": summary.acceptance_rate}
        rows[scenario.name] = {
            "tokens_per_s": tokens_per_s,
            "chose": chose,
            "best_rule": best,
            "best_static": bar.best_static.label(),
            "carried_over_trained": tokens_per_s[CARRIED] / tokens_per_s[TRAINED],
            "trained_over_best_rule": tokens_per_s[TRAINED] / tokens_per_s[best],
            "carried_over_best_rule": tokens_per_s[CARRIED] / tokens_per_s[best],
        }
    command = command_line()
    lines = []
    for name, r in rows.items():
        tokens, best = r["tokens_per_s"], r["best_rule"]
        which = f"{best}, {r['best_static']}" if best == BEST_STATIC else best
        chose = [f"{c['mean_k']:.2f} / {c['acceptance_rate']:.2f}" for c in r["chose"].values()]
        lines.append(
            [name, f"{tokens[PLAIN]:.1f}", f"{tokens[best]:.1f} ({which})", f"{tokens[CARRIED]:.1f}",
             f"{tokens[TRAINED]:.1f}", f"{r['carried_over_trained']:.3f}",
             f"{r['carried_over_best_rule']:.3f}", f"{r['trained_over_best_rule']:.3f}",
             *chose]
        )  # fmt: skip
    header = ["scenario", "plain", "best rule (which)", "carried", "trained", "carried / trained"]
    header += ["carried / best rule", "trained / best rule", "carried: mean k / acceptance", "trained: same"]
    text = (
        f"# `{args.carried}` carried to {pair.name}, against a policy trained on it (simulator)\n\n"
        f"Test traces of each scenario, modeled time priced by this machine's calibration of the pair, "
        f"tokens/s; every controller on the same acceptance draws ({args.sim_repeats} per sampled trace). "
        "The best rule is the fastest of the rules tuned on validation traces and the best static setting "
        "in hindsight on these test traces (a bound).\n\n"
        f"{markdown_table(header, lines)}\n\n"
        f"Carried: `{policies[CARRIED].policy.folder.name}` (trained on {policies[CARRIED].pair}); trained: "
        f"`{trained.policy.folder}` (on {trained.pair}).\n\n"
        f"Command: `{command}` ({(time.perf_counter() - started) / 60:.1f} minutes). Machine: "
        f"{machine_clause(latency.device)}.\n"
    )
    record = {
        "command": command,
        "pair": pair.name,
        "policies": {name: str(policy.policy.folder) for name, policy in policies.items()},
        "sim_repeats": args.sim_repeats,
        "rows": rows,
    }
    measured = (
        f"The policy `{args.carried}` carried to {pair.name} against a policy trained on its traces, "
        "both against plain decoding and the rules of the bar, on the same acceptance draws of the "
        f"test traces of {', '.join(args.scenarios)} (simulator, this machine's prices)."
    )
    write_result(
        args.out,
        "carried",
        text,
        record,
        title=f"`{args.carried}` carried to {pair.name}, simulator: `{args.out.name}`",
        measured=measured,
        command=command,
        machine=machine_clause(latency.device),
    )
    print(text)


if __name__ == "__main__":
    main()
