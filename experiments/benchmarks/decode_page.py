"""``experiments/bench_decode.py``'s page: throughput and acceptance tables per temperature, whether
greedy outputs equal ours plain's, and the per-forward costs."""

from __future__ import annotations

from specrl.tables import markdown_table


def fmt_cell(cell: dict) -> str:
    """Tokens/s and, where known, the ratio to ours plain: ``123.4 (1.52x)``."""
    text, ratio = f"{cell['tokens_per_s']:.1f}", cell["ratio_vs_plain"]
    return f"{text} ({ratio:.2f}x)" if ratio is not None else text


def fmt_acceptance(row: dict, cell: dict) -> str:
    """Acceptance rate (ours with drafts; "-" otherwise) / new tokens per target verification."""
    if row["engine"] == "ours" and row["k"] > 0:
        return f"{cell['acceptance_rate']:.2f} / {cell['tokens_per_verify']:.2f}"
    return f"- / {cell['tokens_per_verify']:.2f}"


def render_markdown(report: dict) -> str:
    """``bench.md`` of a ``bench.json`` report."""
    cfg, rows = report["config"], report["results"]
    columns = [*cfg["domains"], "all"]
    md = [
        f"# Decoding throughput: {report['pair']['name']}",
        "",
        f"{cfg['max_new_tokens']} new tokens per prompt, {cfg['prompts_per_domain']} test prompts per "
        f"domain, median of {cfg['repeats']} interleaved repeats after a warm-up; wall clock of the whole "
        f"generate call (prefill included). Cells: tokens/s (ratio vs ours plain in this run). "
        f"Device {report['machine']['device']} ({report['machine']['dtype']}), "
        f"{report['machine']['cpu_count']} CPUs, torch {report['machine']['torch']}, "
        f"transformers {report['machine']['transformers']}; HF confidence threshold "
        f"{report['machine']['hf_confidence_threshold']}; our KV cache {cfg.get('kv_cache', 'dynamic')}"
        f"{', compiled' if cfg.get('compile') else ''}.",
        "",
    ]
    for t in cfg["temperatures"]:
        at_t = [row for row in rows if row["temperature"] == t]
        name = "greedy" if t == 0 else f"temperature {t:g}"
        md += [f"## Throughput, {name}", ""]
        md.append(
            markdown_table(
                ["configuration", *columns],
                [[row["label"], *(fmt_cell(row["domains"][c]) for c in columns)] for row in at_t],
            )
        )
        md += [
            "",
            f"Acceptance, {name}: acceptance rate / new tokens per target verification "
            "(ours: mean accepted length incl. the bonus token; HF: tokens per target forward).",
            "",
        ]
        md.append(
            markdown_table(
                ["configuration", *columns],
                [
                    [row["label"], *(fmt_acceptance(row, row["domains"][c]) for c in columns)]
                    for row in at_t
                    if row["key"] != "ours-plain"
                ],
            )
        )
        if t == 0:
            bad = [row["label"] for row in at_t if row.get("matches_plain") is False]
            md += [
                "",
                "Greedy outputs equal ours plain: "
                + ("all configurations." if not bad else "NO for " + ", ".join(bad) + "."),
            ]
        md.append("")
    costs = report["forward_costs"]
    target_1 = costs["median_ms"]["target_1"]
    md += [f"## Forward costs (batch 1, context {costs['context']}, median of {costs['reps']})", ""]
    lines = []
    for key, ms in costs["median_ms"].items():
        role, n = key.split("_")
        lines.append([f"{role}, {n} new token{'s' if n != '1' else ''}", f"{ms:.3f}", f"{ms / target_1:.3f}"])
    md.append(markdown_table(["forward", "ms", "vs target 1 token"], lines))
    md += [
        "",
        f"draft / target (1 token each): {costs['draft_over_target']:.3f}",
        "",
        f"Command: `{report['command']}`",
        f"Date: {report['date']}",
        "",
    ]
    return "\n".join(md)
