"""``experiments/batch_real.py``'s page and plot: every controller's tokens per busy second per
scenario, its paired ratios to the schedule (the simulator's beside them) and to plain decoding,
whether outputs equal plain decoding's; the mean k chosen by batch size."""

from __future__ import annotations

import statistics
from pathlib import Path

from benchmarks.origin import origin_line
from benchmarks.result_folder import Run, write_readme
from specrl.evaluation.intervals import paired_ratio_interval
from specrl.io import write_report
from specrl.tables import markdown_table

MEASURED = (
    "Continuous batching in the real loop (requests join the running batch when a row is free): "
    "every controller's tokens per busy second on test requests, its paired ratio to the "
    "batch-size schedule tuned on validation, the simulator's ratio beside it, and whether its "
    "outputs equal plain decoding's."
)


def report_cutoffs(report: dict) -> dict[str, int]:
    """A report's tuned cut-offs by policy label: ``cutoffs`` (several policies), or the one policy's
    ``cutoff`` as ``ppo``'s (the reports of one policy, older ones too); policies never slower than
    plain decoding have none."""
    cutoffs = report.get("cutoffs") or {"ppo": report.get("cutoff")}
    return {label: cutoff for label, cutoff in cutoffs.items() if cutoff is not None}


def cutoff_sentence(report: dict) -> str:
    """How the ``+cutoff`` rows were made, if the report has them."""
    cutoffs = report_cutoffs(report)
    if not cutoffs:
        return ""
    if list(cutoffs) == ["ppo"]:
        switched = f"`ppo+cutoff` is the policy with speculation off above {cutoffs['ppo']} rows"
    else:
        each = ", ".join(f"`{label}+cutoff` above {cutoff} rows" for label, cutoff in cutoffs.items())
        switched = f"The `+cutoff` rows are each policy with speculation off above a batch size ({each})"
    return (
        f" {switched} (vLLM's `speculative_disable_by_batch_size`), the cut-off tuned on validation: "
        "between the last fixed batch size where the policy beats plain decoding and the first where "
        "it does not."
    )


def markdown(report: dict, picture: str) -> str:
    """The page of a ``batch_real.py`` report; ``picture`` is the plot's file name beside it."""
    labels = list(next(iter(report["rows"].values()))["tokens_per_s"])
    others = [label for label in labels if label != "schedule"]
    lines = [
        "# Batch-aware control in the real loop (continuous batching, test prompts)",
        "",
        f"Tokens per busy second, median over {repeats_phrase(report)} interleaved repeats (every other one "
        "runs the controllers in reverse order), with the embedded pair's real decoding loop; requests "
        "arrive on the batch's own clock (its measured work, prefill included) and join the batch when "
        "a row is free. Ratios are medians of the ratios within a repeat, with their 95% interval over "
        "the n repeats (t with n - 1 degrees of freedom; a ratio whose interval holds 1 is a tie); `sim` "
        "is the batch simulator "
        "on the same scenario's test traces. The schedule was tuned on validation "
        f"in the simulator: best k per batch size {report['best_k_validation']} -> "
        f"`{report['schedule']}`.{cutoff_sentence(report)}",
        "",
    ]
    header = [
        "scenario",
        "rows",
        *labels,
        *[f"{label} / schedule [95% interval] n (sim)" for label in others],
        *[f"{label} / plain [95% interval] n" for label in labels if label != "plain"],
        "outputs equal",
    ]
    table = []
    for name, row in report["rows"].items():
        batch = row["batch"]
        rows_text = f"up to {batch['capacity']}" if arrivals(batch) else str(batch["capacity"])
        same = row["outputs_equal_plain"]
        table.append(
            [
                name,
                f"{rows_text} ({batch['requests']} requests)",
                *[f"{row['median_tokens_per_s'][label]:.0f}" for label in labels],
                *[
                    f"{_ratio(row, 'schedule', label)} ({row['sim_ratio_vs_schedule'][label]:.3f})"
                    for label in others
                ],
                *[_ratio(row, "plain", label) for label in labels if label != "plain"],
                "-" if same is None else ("yes" if same else "**no**"),
            ]
        )
    lines += [markdown_table(header, table), "", f"![ratios and k by batch size]({picture})", ""]
    lines += policies_side_by_side(
        {name: row["tokens_per_s"] for name, row in report["rows"].items()}, "a repeat"
    )
    lines += [
        origin_line(report),
        "",
    ]
    return "\n".join(lines)


def arrivals(batch: dict) -> bool:
    """Whether a row's requests arrived over time (a load), not as a fixed batch. Reports written
    before the scenario ``serving`` was renamed ``arrivals`` name the flag ``serving``."""
    return bool(batch.get("arrivals", batch.get("serving", False)))


def repeats_phrase(report: dict) -> str:
    """The report's repeats: "2", or "4 (arrivals) and 8 (fixed batches)"."""
    by_kind: dict[bool, set[int]] = {True: set(), False: set()}
    for row in report["rows"].values():
        by_kind[arrivals(row["batch"])].add(row.get("repeats", report["repeats"]))
    every = by_kind[True] | by_kind[False]
    if len(every) == 1:
        return str(every.pop())
    arriving, fixed = ("/".join(map(str, sorted(by_kind[kind]))) for kind in (True, False))
    return f"{arriving} (arrivals) and {fixed} (fixed batches)"


def policies_side_by_side(values: dict[str, dict[str, list[float]]], unit: str) -> list[str]:
    """With several policies (rows ``ppo:NAME``): a table of the first over each other one per
    scenario, the median of the ratios within ``unit`` ("a repeat", "an episode") with its 95% interval
    and n. ``values``: scenario -> label -> tokens/s per ``unit``. Nothing with fewer than two."""
    labels = [label for label in next(iter(values.values())) if label.startswith("ppo:")]
    labels = [label for label in labels if not label.endswith("+cutoff")]
    if len(labels) < 2:
        return []
    first, others = labels[0], labels[1:]
    table = []
    for name, each in values.items():
        table.append([name, *[paired_ratio_interval(each[first], each[other]).cell() for other in others]])
    header = ["scenario", *[f"{first} / {other} [95% interval] n" for other in others]]
    title = (
        f"The policies side by side: `{first}` over each other one, the median of the ratios within "
        f"{unit}, with its 95% interval over the n of them (an interval that holds 1 is a tie)."
    )
    return [title, "", markdown_table(header, table), ""]


def _ratio(row: dict, reference: str, label: str) -> str:
    """``label``'s paired ratio to ``reference`` with its 95% interval and n, from the row's
    tokens/s per repeat (so a report written with another error bar renders alike), or "-" in a
    report written before that ratio was kept."""
    if row.get(f"ratio_vs_{reference}", {}).get(label) is None:
        return "-"
    speeds = row["tokens_per_s"]
    return paired_ratio_interval(speeds[label], speeds[reference]).cell()


def plot(report: dict, path: Path) -> None:
    """Left: each controller's real ratio to the schedule per scenario (and the simulator's, hollow).
    Right: the mean k each controller chose at each batch size, in the arrivals scenario."""
    import matplotlib.pyplot as plt

    from specrl.plots import save_figure

    rows = report["rows"]
    every = list(next(iter(rows.values()))["tokens_per_s"])
    color = {label: plt.get_cmap("tab10")(i) for i, label in enumerate(every)}
    labels = [label for label in every if label != "schedule"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = list(rows)
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs = [j + (i - (len(labels) - 1) / 2) * width for j in range(len(names))]
        left.bar(
            xs, [rows[n]["ratio_vs_schedule"][label] for n in names], width, label=label, color=color[label]
        )
        left.scatter(
            xs,
            [rows[n]["sim_ratio_vs_schedule"][label] for n in names],
            color="k",
            marker="o",
            facecolors="none",
            s=18,
            zorder=3,
        )
    left.axhline(1.0, color="gray", lw=0.8)
    left.set_xticks(range(len(names)), names)
    left.set_ylabel("tokens/s / schedule's (bars: real, circles: simulator)")
    left.legend(fontsize=8)
    arriving = next((n for n in names if arrivals(rows[n]["batch"])), names[0])
    for label, trace in rows[arriving]["last_repeat"].items():
        by_size: dict[int, list[int]] = {}
        for size, k in zip(trace["batch_sizes"], trace["ks"], strict=True):
            by_size.setdefault(size, []).append(k)
        sizes = sorted(by_size)
        right.plot(
            sizes, [statistics.mean(by_size[s]) for s in sizes], marker=".", label=label, color=color[label]
        )
    right.set_xscale("log", base=2)
    right.set_xlabel(f"rows in the batch ({arriving})")
    right.set_ylabel("mean k chosen")
    right.legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, path)


def write(report: dict, out: Path) -> str:
    """``out.json``, ``out.md`` and ``out.png`` of a report; returns the page."""
    page = markdown(report, out.with_suffix(".png").name)
    write_report(out, report, page)
    plot(report, out.with_suffix(".png"))
    files = [out.with_suffix(suffix).name for suffix in (".md", ".json", ".png")]
    run = Run(f"Continuous batching in the real loop: `{out.name}`", MEASURED, report["command"],
              report["machine"], files[:1], files[1:2], files[2:])  # fmt: skip
    write_readme(out.parent, run)
    return page
