"""``experiments/bench_drafters.py``'s page and plot: per domain and drafter the best k (on
validation), acceptance, cost and speed-up (on test); the pool rule against the best single
drafter; the quantised drafts against the full-precision one; speed-up by k."""

from __future__ import annotations

from pathlib import Path

from benchmarks.drafters import QUANTIZED
from benchmarks.origin import describe_commit
from benchmarks.result_folder import Run, write_readme
from specrl.io import write_report
from specrl.provenance import describe_machine
from specrl.tables import markdown_table


def markdown(report: dict) -> str:
    """``drafters.md`` of a ``drafters.json`` report."""
    table, config = report["table"], report["config"]
    drafters, domains = config["drafters"], config["domains"]
    header = ["domain", "drafter", "best k (validation)", "acceptance", "cost / verify", "speed-up (test)",
              "equals plain"]  # fmt: skip
    rows = []
    for domain in domains:
        for drafter in drafters:
            row = table[domain]["drafters"][drafter]
            mark = " (best single)" if drafter == table[domain]["best_drafter"] else ""
            rows.append([
                domain, drafter, str(row["best_k"]), f"{row['acceptance']:.2f}",
                "-" if row["cost"] is None else f"{row['cost']:.3f}", f"{row['speedup']:.2f}x{mark}",
                "yes" if row["identical_to_plain"] else "NO",
            ])  # fmt: skip
    pool_rows = [
        [domain, table[domain]["best_drafter"], f"{table[domain]['pool_rule_vs_best_single']:.2f}x"]
        for domain in domains if "pool_rule_vs_best_single" in table[domain]
    ]  # fmt: skip
    quant_rows = []
    for domain in domains:
        for name in (q for q in QUANTIZED if q in drafters and "vs_draft" in table[domain]["drafters"][q]):
            change = table[domain]["drafters"][name]["vs_draft"]
            ratio = change["cost_ratio"]
            quant_rows.append([domain, name, f"{change['acceptance_change']:+.3f}",
                               "-" if ratio is None else f"{ratio:.2f}x"])  # fmt: skip
    by_k_header = ["domain", "drafter", *(f"k={k}" for k in config["ks"])]
    by_k_rows = []
    for domain in domains:
        for drafter in drafters:
            test = table[domain]["drafters"][drafter]["speedup_by_k"]["test"]
            by_k_rows.append([domain, drafter, *(f"{test[str(k)]:.2f}" for k in config["ks"])])
    machine = report["machine"]
    commit = describe_commit(machine)
    batch = config.get("batch", 1)
    rows_together = "one at a time"
    if batch > 1:
        rows_together = f"decoded {batch} at a time (a batch of {batch} rows, each accepting its own tokens)"
    lines = [
        "# The drafter pool, measured in the real loop" + (f", batches of {batch}" if batch > 1 else ""),
        "",
        f"Pair {report['pair']['name']}; greedy, {config['max_new_tokens']} new tokens; {config['prompts']} "
        f"prompts per domain and split, {rows_together}; median of {config['repeats']} interleaved passes "
        "after a warm-up; "
        "time includes prefill. Best k chosen on the validation prompts, every figure on the test prompts. "
        "Cost: draft seconds per drafted position over target-verify seconds per step (n-gram lookup: no "
        "model forward). Speed-up: over plain decoding of the same prompts, in the same passes.",
        "",
        markdown_table(header, rows),
        "",
        "## The seed's pool rule against the best single drafter (test)",
        "",
        "The pool rule drafts with the drafter of best recent acceptance (window 8, the least recently used "
        "every 16th step), at its k chosen on validation; the best single drafter and its k are chosen on "
        "validation too.",
        "",
        markdown_table(["domain", "best single drafter", "pool rule / best single"], pool_rows)
        if pool_rows
        else "(the pool rule was not measured)",
        "",
        "## Quantised drafts against the full-precision draft (test, mean over k)",
        "",
        markdown_table(["domain", "drafter", "acceptance change", "cost ratio"], quant_rows)
        if quant_rows
        else "(no quantised drafter measured)",
        "",
        "## Speed-up over plain decoding by k (test)",
        "",
        markdown_table(by_k_header, by_k_rows),
        "",
        "![speed-up at the best static k per drafter and domain](drafters.png)",
        "",
        f"Command: `{report['command']}`",
        "",
        f"Machine: {describe_machine(machine)}{'; ' + commit if commit else ''}; {report['date']}.",
        "",
    ]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    """Speed-up at the best static k, grouped by domain, one bar per drafter."""
    from benchmarks.figures import bar_groups

    table, config = report["table"], report["config"]
    bar_groups(
        path,
        groups=config["domains"],
        series={
            d: [table[dom]["drafters"][d]["speedup"] for dom in config["domains"]] for d in config["drafters"]
        },
        ylabel="speed-up over plain decoding (test, best k on validation)",
        title=f"Drafter pool on {report['pair']['name']}",
        reference=1.0,
    )


def write(report: dict, out: Path) -> None:
    """``drafters.json``, ``drafters.md`` and ``drafters.png`` in ``out``."""
    write_report(out / "drafters", report, markdown(report))
    plot(report, out / "drafters.png")
    batch = report["config"].get("batch", 1)
    title = "The drafter pool" + (f" in batches of {batch}" if batch > 1 else "")
    measured = (
        "Every drafter and the pool rule per domain in the real loop: acceptance, cost per drafted "
        "position, speed-up at the best static k (chosen on validation, reported on test)"
        + (f"; every domain's prompts decoded {batch} at a time." if batch > 1 else ".")
    )
    files = ["drafters.md"], ["drafters.json"], ["drafters.png"]
    write_readme(out, Run(title, measured, report["command"], report["machine"], *files))
