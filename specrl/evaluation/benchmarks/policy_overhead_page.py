"""``experiments/policy_overhead.py``'s page: one table of the decision's cost and its share of
an iteration, with the command and the date."""

from __future__ import annotations

from typing import Any

from specrl.tables import markdown_table


def markdown(result: dict[str, Any]) -> str:
    """The page of a result: the measurements of
    :func:`~specrl.evaluation.benchmarks.policy_overhead.measure` with the policy, pair, device,
    command and date."""
    rows = [
        ("policy", f"`{result['policy']}` (trained on {result['policy_pair']})"),
        ("pair", f"{result['pair']} on {result['device']}"),
        (
            "decision alone, median / p90",
            f"{result['alone_us_median']:.1f} / {result['alone_us_p90']:.1f} µs",
        ),
        (
            "step decision in decode, median",
            f"{result['in_decode_us_median']:.1f} µs ({result['steps']} decisions)",
        ),
        (
            "per-token stop calls of a step, median / mean",
            f"{result['stop_us_median']:.1f} / {result['stop_us_mean']:.1f} µs",
        ),
        ("lookup feature of a step, median", f"{result['lookup_us_median']:.1f} µs"),
        ("all of it, median per iteration", f"{result['decision_us_median']:.1f} µs"),
        ("mean iteration (draft + verify)", f"{result['mean_iteration_ms']:.3f} ms"),
        ("decision / iteration", f"{100 * result['share_of_iteration']:.2f} %"),
    ]
    lines = ["# Policy decision overhead", "", markdown_table(["measure", "value"], rows)]
    lines += ["", f"Command: `{result['command']}`", f"Date: {result['date']}", ""]
    return "\n".join(lines)
