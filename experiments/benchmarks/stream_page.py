"""``experiments/serve_stream.py``'s pages: per seed ``stream.json``, ``stream.md`` (this header
over :func:`benchmarks.stream_tables.markdown`'s tables) and ``stream.png``; with several seeds
a ``stream.md`` with the seeds side by side."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.origin import describe_commit
from benchmarks.result_folder import Run, write_readme
from benchmarks.stream_tables import markdown, plot
from specrl.io import write_text_atomic
from specrl.provenance import describe_machine
from specrl.tables import markdown_table


def write_seed(report: dict[str, Any], folder: Path) -> str:
    """``folder/stream.json``, ``stream.md`` and ``stream.png`` of one seed's report; returns the page."""
    write_text_atomic(folder / "stream.json", json.dumps(report, indent=1, default=str) + "\n")
    page = markdown(report, header(report), image="stream.png")
    write_text_atomic(folder / "stream.md", page)
    plot(report, folder / "stream.png")
    return page


def render(out: Path) -> list[dict[str, Any]]:
    """Rewrite the pages and plots of a finished run in ``out`` from its JSON files (no decoding)."""
    files = sorted(out.glob("seed*/stream.json")) or [out / "stream.json"]
    reports = [json.loads(path.read_text()) for path in files]
    for path, report in zip(files, reports, strict=True):
        write_text_atomic(path.parent / "stream.md", markdown(report, header(report), image="stream.png"))
        plot(report, path.parent / "stream.png")
    if len(reports) > 1:
        write_text_atomic(out / "stream.md", spread_markdown(reports))
    write_readme_of(out, reports)
    return reports


def write_readme_of(out: Path, reports: list[dict[str, Any]]) -> None:
    """The run's section of its result folder's README.md: the seeds' page, each seed's files."""
    seeds = [f"seed{r['stream']['seed']}/" for r in reports] if len(reports) > 1 else [""]
    measured = (
        "A shifting request stream served one request at a time by plain decoding and by the frozen or "
        "the online-adapted draft under each controller; tokens/s include the adaptations' time; "
        f"{len(reports)} seed(s)."
    )
    tables = ["stream.md"] + ([f"{seed}stream.md" for seed in seeds] if len(reports) > 1 else [])
    first = reports[0]
    run = Run("Online draft adaptation on a shifting request stream", measured, first["command"],
              first["machine"], tables, [f"{seed}stream.json" for seed in seeds],
              [f"{seeds[0]}stream.png"])  # fmt: skip
    write_readme(out, run)


def spread_markdown(reports: list[dict]) -> str:
    """The seeds side by side: tokens/s (adaptation included) against plain and against the frozen
    draft, and math acceptance frozen -> adapted after the first swap, per seed, with the median."""
    first = reports[0]
    setups = list(first["setups"])
    seeds = [r["stream"]["seed"] for r in reports]
    rows = []
    for name in setups:
        frozen = name.replace("adapted", "frozen", 1) if name.startswith("adapted") else None
        vs_plain = [r["setups"][name]["tokens_per_s"] / r["setups"]["plain"]["tokens_per_s"] for r in reports]
        cells = [name, *(f"{v:.3f}x" for v in vs_plain), f"{statistics.median(vs_plain):.3f}x"]
        if frozen:
            vs_frozen = [
                r["setups"][name]["tokens_per_s"] / r["setups"][frozen]["tokens_per_s"] for r in reports
            ]
            cells += [*(f"{v:.3f}x" for v in vs_frozen), f"{statistics.median(vs_frozen):.3f}x"]
        else:
            cells += ["-"] * (len(seeds) + 1)
        rows.append(cells)
    header_cells = ["setup", *(f"vs plain, seed {s}" for s in seeds), "median"]
    header_cells += [*(f"vs frozen, seed {s}" for s in seeds), "median"]
    math_rows = []
    for row in first["domains"]:
        cells = [row["controller"], row["domain"]]
        for r in reports:
            match = next(
                d
                for d in r["domains"]
                if d["controller"] == row["controller"] and d["domain"] == row["domain"]
            )
            before, after = match["frozen_after"], match["adapted_after"]
            cells.append("-" if before is None or after is None else f"{before:.3f} -> {after:.3f}")
        math_rows.append(cells)
    machine = first["machine"]
    return "\n".join(
        [
            f"# Request stream `{first['stream']['name']}` ({first['stream']['split']} split), "
            f"seeds {', '.join(map(str, seeds))}: frozen vs adapted draft",
            "",
            "Each seed draws its own request order and held-back requests from the same prompts; every page",
            "below holds one seed in full (tables, plot, adaptations). Tokens/s include adaptation time.",
            "",
            markdown_table(header_cells, rows),
            "",
            "Acceptance (accepted / proposed) on the requests after the adapted draft's first swap, "
            "frozen -> adapted:",
            "",
            markdown_table(["controller", "domain", *(f"seed {s}" for s in seeds)], math_rows),
            "",
            "Pages: " + ", ".join(f"[seed {s}](seed{s}/stream.md)" for s in seeds) + ".",
            "",
            f"Command: `{first['command']}`",
            "",
            f"Machine: {describe_machine(machine)}; {describe_commit(machine) or 'commit unknown'}"
            + f"; {reports[-1]['date']}; {sum(r['wall_seconds'] for r in reports) / 60:.1f} min.",
            "",
        ]
    )


def header(report: dict) -> str:
    """One seed's page header: the stream, its adaptation settings, the output check, the command
    and the machine."""
    stream, machine = report["stream"], report["machine"]
    adaptation = stream["adaptation"]
    segments = ", ".join(
        f"{s['name']} ({', '.join(f'{d} {n}' for d, n in s['requests'].items())})" for s in stream["segments"]
    )
    identical = report["outputs_identical_to_plain"]
    return "\n".join(
        [
            f"# Request stream `{stream['name']}` ({stream['split']} split): frozen vs adapted draft",
            "",
            f"{stream['description']} {report['stream']['requests_served']} requests, one at a time: "
            f"{segments}; {stream['max_new_tokens']} new tokens each, temperature "
            f"{stream['sampling']['temperature']}, seed {stream['seed']}. Pair {report['pair']['name']}.",
            "",
            f"Every {adaptation['every']} requests, when the live draft's acceptance on them is below "
            f"{adaptation['adapt_below']}, an adaptation runs in between requests (serving pauses; its time "
            f"counts): at most {adaptation['steps']} AdamW steps (batch {adaptation['batch_size']}, lr "
            f"{adaptation['lr']}) of KD (T = {adaptation['temperature']}, alpha = {adaptation['alpha']}) "
            f"plus LM loss on the generated tokens of the last {adaptation['window']} requests (the target's "
            f"logits kept from its verify forwards), {adaptation['holdout']:.0%} of requests held back to "
            "judge the candidate.",
            "",
            "Greedy outputs identical to plain decoding in every setup: "
            + (
                "not checked (sampling)"
                if identical is None
                else "yes"
                if all(identical.values())
                else f"NO {identical}"
            )
            + ".",
            "",
            f"Command: `{report['command']}`",
            "",
            f"Machine: {describe_machine(machine)}; {describe_commit(machine) or 'commit unknown'}"
            + f"; {report['date']}; {report['wall_seconds'] / 60:.1f} min.",
        ]
    )
