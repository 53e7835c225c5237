"""``experiments/bench_batch.py``'s page and plot: speed-up over plain batched decoding by batch size
and k, acceptance per row, verification cost per step, and the lossless check."""

from __future__ import annotations

from pathlib import Path

from benchmarks.origin import origin_line
from benchmarks.result_folder import Run, write_readme
from specrl.io import write_report
from specrl.tables import markdown_table

MEASURED = (
    "B test prompts decoded together, one k for every row, each row accepting its own tokens: "
    "speed-up over plain batched decoding by batch size and k, acceptance per row, the cost of a "
    "verification; every output checked against plain batched decoding."
)


def markdown(report: dict) -> str:
    """``batch.md`` of a ``batch.json`` report."""
    table, config = report["table"], report["config"]
    ks, sizes = config["ks"], config["batch_sizes"]
    spec = [k for k in ks if k]
    lines = [
        f"# Batched speculative decoding on {report['pair']['name']}",
        "",
        "Greedy decoding of B test prompts together (the domains in turn), "
        f"{config['max_new_tokens']} tokens a row, `StaticController(k)`; {config['repeats']} interleaved "
        "passes, medians. Speed-up: tokens/s summed over rows over plain batched decoding (k = 0) at "
        "the same B, in the same pass.",
        "",
        "## Speed-up over plain batched decoding",
        "",
    ]
    rows = []
    for b in sizes:
        entry = table[str(b)]
        cells = [b, f"{entry['ks']['0']['tokens_per_s']:.0f}" if "0" in entry["ks"] else "-"]
        for k in spec:
            value = entry["ks"][str(k)]["speedup"]
            mark = "**" if k == entry["best_k"] else ""
            cells.append(f"{mark}{value:.2f}{mark}" if value is not None else "-")
        rows.append(cells)
    lines += [markdown_table(["B", "plain tok/s", *[f"k={k}" for k in spec]], rows), ""]
    lines += ["Bold: the best k at that batch size.", "", "## Acceptance per row", ""]
    rows = []
    for b in sizes:
        cells = [b]
        for k in spec:
            e = table[str(b)]["ks"][str(k)]
            mean, low, high = e["row_acceptance_mean"], e["row_acceptance_min"], e["row_acceptance_max"]
            cells.append(f"{mean:.3f} ({low:.2f}-{high:.2f})" if mean is not None else "-")
        rows.append(cells)
    spread = report["same_prompt_spread"]
    lines += [
        "Mean over rows of each row's accepted / proposed (min-max over rows). A larger batch adds "
        "other prompts (row i is test prompt i), so the mean moves with the prompts it holds; the "
        "same prompt's acceptance at different batch sizes differs by at most "
        + ", ".join(f"{spread[str(k)]:.3f} (k={k})" for k in spec)
        + ": batching does not change what a row accepts.",
        "",
        markdown_table(["B", *[f"k={k}" for k in spec]], rows),
        "",
        "## Verification cost per step (ms)",
        "",
        markdown_table(
            ["B", *[f"k={k}" for k in ks]],
            [[b, *[f"{table[str(b)]['ks'][str(k)]['verify_ms_per_step']:.1f}" for k in ks]] for b in sizes],
        ),
        "",
    ]
    lossless = all(e["lossless"] in (None, True) for entry in table.values() for e in entry["ks"].values())
    lines += [
        f"Every output equals plain batched decoding token for token: {'yes' if lossless else 'NO'}.",
        "",
        origin_line(report),
        "",
    ]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    """Speed-up over plain batched decoding against the batch size, one line per k."""
    import matplotlib.pyplot as plt

    from specrl.plots import save_figure

    table, config = report["table"], report["config"]
    sizes = config["batch_sizes"]
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    cmap = plt.get_cmap("viridis")
    spec = [k for k in config["ks"] if k]
    for i, k in enumerate(spec):
        values = [table[str(b)]["ks"][str(k)]["speedup"] for b in sizes]
        ax.plot(sizes, values, marker="o", label=f"k={k}", color=cmap(i / max(1, len(spec) - 1)))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("speed-up over plain batched decoding")
    ax.set_title(f"Batched speculative decoding on {report['pair']['name']}")
    ax.legend(fontsize=8, ncol=3)
    save_figure(fig, path)


def write(report: dict, out: Path) -> None:
    """``batch.json``, ``batch.md`` and ``batch.png`` in ``out``."""
    write_report(out / "batch", report, markdown(report))
    plot(report, out / "batch.png")
    run = Run("Speed-up by batch size and k", MEASURED, report["command"], report["machine"],
              ["batch.md"], ["batch.json"], ["batch.png"])  # fmt: skip
    write_readme(out, run)
