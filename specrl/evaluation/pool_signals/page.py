"""The page of a pool-signals run: per scenario the best static, the clairvoyant oracle and each
signal set's table policy as ratios to the best static, and the first scenario's table."""

from __future__ import annotations

from specrl.evaluation.machine import describe_commit, describe_machine
from specrl.evaluation.pool_signals.signals import SIGNAL_SETS
from specrl.tables import markdown_table


def render(results: dict) -> str:
    """The markdown page of a run's results."""
    fit, split = results["fit_split"], results["split"]
    lines = [
        f"# What the text's signals buy a pool controller ({split} traces, simulator)",
        "",
        f"Throughput over the best static setting on the {split} split, modeled time (the calibrated "
        f"latency model of this machine). A table policy picks (k, drafter) per signal value; "
        f"'fit on {fit}' is fit on the {fit} split and scored on {split}, 'in-sample' is fit on {split} "
        "itself (optimistic: the table sees the traces it is scored on). The script's docstring "
        "defines the signals.",
        "",
    ]
    header = ["scenario", "best static", "clairvoyant"]
    for label in SIGNAL_SETS:
        header += [f"{label}: fit on {fit}", f"{label}: in-sample"]
    rows = []
    for name, row in results["rows"].items():
        base = row["best_static"]["tokens_per_s"]
        cells = [
            name,
            f"{base:.1f} tok/s ({row['best_static']['drafter']} k={row['best_static']['k']})",
            f"{row['clairvoyant'] / base:.3f}",
        ]
        for label in SIGNAL_SETS:
            signal = row["signals"][label]
            cells += [f"{signal['fit_on_' + fit] / base:.3f}", f"{signal['in_sample'] / base:.3f}"]
        rows.append(cells)
    lines += [markdown_table(header, rows), ""]
    first = next(iter(results["rows"]))
    table = results["rows"][first]["signals"][list(SIGNAL_SETS)[-1]]["table"]
    lines += [
        f"The table fit on {fit} for {first} (signal values `order run short` -> action):",
        "",
        markdown_table(["order run short", "action"], list(table.items())),
        "",
        f"Command: `{results['command']}` ({results['seconds']} s). "
        f"Machine: {describe_machine(results['machine'])}; {describe_commit(results['machine']) or ''}",
        "",
    ]
    return "\n".join(lines)
