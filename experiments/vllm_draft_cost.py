"""What the draft model costs inside vLLM: specrl's proposer against vLLM's own ``draft_model``, per
drafted token and row (issue 53, item 6; ``results/vllm/draft_cost.{json,md}``).

Both engines draft k tokens with the embedded draft model at every step (specrl: ``static:K``, no
cut), so the target verifies the same k + 1 tokens a row in both, and a step differs only in how
its draft is made. Per fixed batch of B rows (test requests, greedy, EOS ignored), each engine in a
process of its own, interleaved repeats (``bench_vllm.py``'s ``interleaved``):

- specrl's draft: the proposer's own clock around its batched draft forwards, per step, with each
  of its draft caches (``draft_cache``: transformers' dynamic cache, a static one, static and
  compiled);
- vLLM's draft: its step time minus the step time of specrl's engine (dynamic cache) net of the
  proposer's whole call (what is left of a specrl step is vLLM verifying the same tokens);

each divided by k and B. The ratio specrl / vLLM is paired within a repeat, with its 95% interval.

    python experiments/vllm_draft_cost.py                     # results/vllm/draft_cost.*
    python experiments/vllm_draft_cost.py --repeats 1 --max-new-tokens 16 --out /tmp/draft_cost
"""

from __future__ import annotations

import argparse
from pathlib import Path
from statistics import median

from benchmarks.vllm_engines import interleaved, vllm_static
from benchmarks.vllm_summary import fixed_workloads

REPO = Path(__file__).resolve().parent.parent
BATCHES = (1, 4, 16)
SPECRL = "specrl, dynamic cache"
CACHES = {SPECRL: "dynamic", "specrl, static cache": "static", "specrl, compiled": "compiled"}
MEASURED = (
    "The embedded draft model's cost per drafted token and row inside vLLM's CPU build: specrl's "
    "proposer (static k, its batched draft forwards) against vLLM's own draft_model at the same k, "
    "on fixed batches of test requests; both verify k + 1 tokens a row every step."
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--k", type=int, default=4, help="tokens drafted every step")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5, help="interleaved repeats")
    parser.add_argument("--out", default=str(REPO / "results" / "vllm" / "draft_cost"), help="output stem")
    return parser.parse_args(argv)


def per_token(runs: list[dict], k: int, rows: int) -> dict[str, list[float]]:
    """Per run: seconds per step, the proposer's per step (all of it, its draft forwards) and the
    draft's per drafted token and row."""
    out: dict[str, list[float]] = {"step": [], "propose": [], "draft": []}
    for run in runs:
        steps = run["steps"]
        out["step"].append(run["busy_seconds"] / steps)
        spent = run.get("proposer_seconds") or {"total": 0.0, "draft": 0.0}
        out["propose"].append(spent["total"] / steps)
        out["draft"].append(spent["draft"] / steps / (k * rows))
    return out


def summarise(runs: dict[str, dict[str, list]], k: int) -> dict[str, dict]:
    """Per batch and specrl draft cache: the draft's ms per drafted token and row, specrl's and
    vLLM's (vLLM's step less the dynamic-cache specrl step net of its proposer), their ratio."""
    from specrl.evaluation.intervals import paired_ratio_interval

    rows = {}
    for batch in BATCHES:
        name = f"test B={batch}"
        reference = per_token(runs[SPECRL][name], k, batch)
        theirs = per_token(runs["vLLM"][name], k, batch)
        vllm_draft = [
            (step - (mine - propose)) / (k * batch)
            for step, mine, propose in zip(
                theirs["step"], reference["step"], reference["propose"], strict=True
            )
        ]
        for label in CACHES:
            ours = per_token(runs[label][name], k, batch)
            ratio = paired_ratio_interval(ours["draft"], vllm_draft)
            rows[f"B={batch}, {label}"] = {
                "specrl_draft_ms": 1000 * median(ours["draft"]),
                "vllm_draft_ms": 1000 * median(vllm_draft),
                "specrl_step_ms": 1000 * median(ours["step"]),
                "vllm_step_ms": 1000 * median(theirs["step"]),
                "proposer_ms": 1000 * median(ours["propose"]),
                **ratio.as_json("specrl_over_vllm"),
                "ratio": ratio,
            }
    return rows


def page(report: dict) -> str:
    from benchmarks.origin import origin_line

    from specrl.tables import markdown_table

    header = [
        "batch, specrl's draft cache",
        "specrl draft (ms / token / row)",
        "vLLM draft (ms / token / row)",
        "specrl / vLLM",
        "step, specrl (ms)",
        "step, vLLM (ms)",
        "proposer's call (ms / step)",
    ]
    table = [
        [
            name,
            f"{r['specrl_draft_ms']:.3f}",
            f"{r['vllm_draft_ms']:.3f}",
            r["ratio_cell"],
            f"{r['specrl_step_ms']:.2f}",
            f"{r['vllm_step_ms']:.2f}",
            f"{r['proposer_ms']:.2f}",
        ]
        for name, r in report["rows"].items()
    ]
    return "\n".join(
        [
            "# The draft model's cost inside vLLM: specrl's proposer against vLLM's draft_model",
            "",
            f"{MEASURED} k = {report['k']}, {report['max_new_tokens']} new tokens a request, medians over "
            f"{report['repeats']} interleaved repeats; the ratio is paired within a repeat, with its 95% "
            "interval (t, n - 1 degrees of freedom) and n.",
            "",
            markdown_table(header, table),
            "",
            origin_line(report),
            "",
        ]
    )


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    from benchmarks.origin import result_origin
    from benchmarks.result_folder import Run, write_readme

    import specrl
    from specrl.embedded import ensure_pair
    from specrl.io import write_report
    from specrl.vllm.compat import require_vllm

    require_vllm()
    pair = specrl.load_pair(device="cpu")
    target, draft = str(ensure_pair("small") / "target"), str(ensure_pair("small") / "draft")
    fixed = fixed_workloads(pair, "test", BATCHES)
    common = {"target": target, "max_new_tokens": args.max_new_tokens, "workloads": fixed}
    proposer = {"method": "custom_class", "model": "specrl.vllm.Proposer", "num_speculative_tokens": args.k}
    jobs = {"vLLM": common | {"speculative": vllm_static("draft_model", args.k, draft)}}
    for label, cache in CACHES.items():
        settings = {"controller": f"static:{args.k}", "draft": draft, "draft_cache": cache}
        jobs[label] = common | {"speculative": proposer, "additional": {"specrl": settings}}
    out = Path(args.out)
    runs = interleaved(jobs, args.repeats, "draft cost", out.with_suffix(".runs.json"))
    rows = summarise(runs, args.k)
    report = {
        "rows": {name: {k: v for k, v in row.items() if k != "ratio"} for name, row in rows.items()},
        "k": args.k,
        "max_new_tokens": args.max_new_tokens,
        "repeats": args.repeats,
        **result_origin(pair),
    }
    for name, row in rows.items():
        report["rows"][name]["ratio_cell"] = row["ratio"].cell()
    text = page(report)
    write_report(out, report, text)
    files = [out.with_suffix(suffix).name for suffix in (".md", ".json")]
    write_readme(
        out.parent,
        Run(
            "The draft's cost inside vLLM",
            MEASURED,
            report["command"],
            report["machine"],
            files[:1],
            files[1:],
        ),
    )
    out.with_suffix(".runs.json").unlink(missing_ok=True)
    print(text)
    return report


if __name__ == "__main__":
    main()
