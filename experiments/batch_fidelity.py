"""Where the batch simulator's prices part from the real loop: every real step of continuous
batching against the batched latency model's price for the same step.

For each batch size and k, ``B + B // 2`` test requests are served with continuous batching
(``specrl.serving.serve_continuous``, static k). Every step's measured seconds of drafting and of
verification are compared with what ``specrl.latency.batch`` models for the same (rows, tokens
fed, draft forwards, width of the cache grid), and every admission's prefill with its modeled
prefill; then the whole busy time. The model was calibrated on train prompts, so this checks it
on prompts it has not seen. It also reports how many cache slots the real batch carries per token
of context (holes of rejected tokens and joined rows' padding, which attention still reads) and
the share of the busy time spent in prefill.

    python experiments/batch_fidelity.py          # results/batch/fidelity.{json,md}, ~7 minutes
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tqdm.auto import tqdm

import specrl
from specrl.envs import load_scenario
from specrl.evaluation.machine import origin_line, result_origin
from specrl.io import write_report
from specrl.latency import step_shape
from specrl.latency.batch import CALIBRATION_KS
from specrl.serving import TimedRequest, scenario_requests, serve_continuous
from specrl.tables import markdown_table

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--ks", type=int, nargs="+", default=list(CALIBRATION_KS))
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", default=str(REPO / "results" / "batch" / "fidelity"), help="output stem")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    scenario = load_scenario("arrivals")  # its domains: code, prose, arithmetic
    pair = scenario.pair.load()
    latency = scenario.latency_model(pair)
    rows = []
    for size in tqdm(args.sizes, desc="batch sizes"):
        drawn = scenario_requests(scenario, pair, "test", seed=0, count=size + size // 2, latency=latency)
        requests = [TimedRequest(request.prompt_ids) for request in drawn]  # all waiting at the start
        for k in args.ks:
            steps = []

            def record(generation, step, steps=steps):
                results = step.results
                forwards, proposed = step_shape(results)
                context = sum(r.context_length for r in results) / len(results)
                modeled = latency.step_seconds(step.slots + 1, forwards, proposed, rows=len(results))
                steps.append((step.draft_seconds, step.verify_seconds, *modeled, step.slots / context))

            run = serve_continuous(
                pair, specrl.StaticController(k), requests, size, args.max_new_tokens, on_step=record
            )
            prefill = sum(
                latency.prefill_seconds(a.prompt_lengths, a.rows, a.slots + 1 if a.rows else 0)
                for a in run.admissions
            )
            modeled_busy = prefill + sum(s[2] + s[3] for s in steps)
            rows.append(
                {
                    "batch_size": size,
                    "k": k,
                    "steps": len(steps),
                    "draft_modeled_over_measured": sum(s[2] for s in steps) / sum(s[0] for s in steps)
                    if k
                    else None,
                    "verify_modeled_over_measured": sum(s[3] for s in steps) / sum(s[1] for s in steps),
                    "prefill_modeled_over_measured": prefill / run.prefill_seconds,
                    "busy_modeled_over_measured": modeled_busy / run.busy_seconds,
                    "slots_per_context_token": sum(s[4] for s in steps) / len(steps),
                    "prefill_share": run.prefill_seconds / run.busy_seconds,
                    "tokens_per_s": run.tokens_per_s,
                }
            )
    report = {
        "rows": rows,
        "max_new_tokens": args.max_new_tokens,
        **result_origin(pair),
    }
    out = Path(args.out)
    write_report(out, report, markdown(report))
    print(markdown(report))
    return report


def markdown(report: dict) -> str:
    header = ["B", "k", "steps", "draft: modeled / measured", "verify: modeled / measured",
              "prefill: modeled / measured", "busy time: modeled / measured",
              "cache slots per context token", "prefill share of busy time", "tokens/s"]  # fmt: skip
    table = [
        [
            row["batch_size"],
            row["k"],
            row["steps"],
            "-"
            if row["draft_modeled_over_measured"] is None
            else f"{row['draft_modeled_over_measured']:.2f}",
            f"{row['verify_modeled_over_measured']:.2f}",
            f"{row['prefill_modeled_over_measured']:.2f}",
            f"**{row['busy_modeled_over_measured']:.2f}**",
            f"{row['slots_per_context_token']:.2f}",
            f"{row['prefill_share']:.3f}",
            f"{row['tokens_per_s']:.0f}",
        ]
        for row in report["rows"]
    ]
    busy = [row["busy_modeled_over_measured"] for row in report["rows"]]
    return "\n".join(
        [
            "# The batch simulator's prices against the real loop (continuous batching)",
            "",
            f"Every step of serving B + B // 2 test requests of code, prose and arithmetic, "
            f"{report['max_new_tokens']} new tokens each, with continuous batching and a static k. A "
            "ratio below 1: the simulator prices the work cheaper than it is. The simulator prices each "
            "step at the width of the cache grid (holes included) and each admission's prefill; it was "
            f"calibrated on train prompts. Busy time, modeled over measured: {min(busy):.2f} to "
            f"{max(busy):.2f}.",
            "",
            markdown_table(header, table),
            "",
            "What the simulator must get right is which k wins at each batch size: throughput with k "
            "over throughput with k = 0 at the same size, modeled (tokens over modeled busy time) and "
            "measured.",
            "",
            ranking_table(report["rows"]),
            "",
            origin_line(report),
            "",
        ]
    )


def ranking_table(rows: list[dict]) -> str:
    """Per batch size: each k's throughput over k = 0's, modeled / measured."""
    ks = sorted({row["k"] for row in rows if row["k"]})
    lines = []
    for size in sorted({row["batch_size"] for row in rows}):
        at = {row["k"]: row for row in rows if row["batch_size"] == size}
        if 0 not in at:
            continue
        plain = at[0]["tokens_per_s"]
        modeled_plain = plain / at[0]["busy_modeled_over_measured"]
        cells = []
        for k in ks:
            row = at.get(k)
            modeled = row["tokens_per_s"] / row["busy_modeled_over_measured"] / modeled_plain if row else None
            cells.append("-" if row is None else f"{modeled:.2f} / {row['tokens_per_s'] / plain:.2f}")
        lines.append([size, *cells])
    return markdown_table(["B", *[f"k = {k} / k = 0 (modeled / measured)" for k in ks]], lines)


if __name__ == "__main__":
    main()
