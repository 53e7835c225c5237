"""A result folder's ``README.md``, written by the script that measured it: what was measured, the
command, the commit, the machine, its tables and plots (``results/README.md`` lists the folders).

A result folder is a folder of ``results/`` (a run written below it, as ``--out
results/real_loop/xeon``, belongs to ``results/real_loop``), or the folder a run was written to
elsewhere. It may hold several runs (``batch_real.py --out results/batch/real_b64`` beside
``bench_batch.py``'s page): each run is a ``## `` section of the README, and a script rewrites only
its own section (the one whose tables begin with its table), keeping the folder's title, its
summary, the headings and the other sections. Findings written by hand stay in ``notes.md`` beside
it, which the README links.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from specrl.io import write_text_atomic
from specrl.provenance import describe_machine, git_state, short_commit

RESULTS = Path(__file__).resolve().parents[2] / "results"
FINDINGS = "## Findings"
NOTES = "Written by hand: [`notes.md`](notes.md)."


@dataclass(frozen=True)
class Run:
    """One measured result in a folder: its heading, what it measured and how it was made.

    ``machine`` is the record a report keeps (:func:`specrl.evaluation.machine.machine_info`; its
    ``git`` state gives the commit) or a line describing it. ``tables``, ``data`` and ``plots`` are
    paths relative to the folder. ``commit`` overrides the commit line (a run made before this
    helper); ``more`` are further bullet lines, kept as written.
    """

    title: str
    measured: str
    command: str
    machine: dict | str
    tables: Sequence[str] = ()
    data: Sequence[str] = ()
    plots: Sequence[str] = ()
    commit: str | None = None
    more: Sequence[str] = ()


def commit_line(machine: dict | str) -> str:
    """The run's :func:`specrl.provenance.short_commit`: from the report's recorded git state,
    else the checkout's now."""
    state = (machine.get("git") if isinstance(machine, dict) else None) or git_state()
    return short_commit(state) or "unknown (not run from a git checkout)"


def links(paths: Sequence[str]) -> str:
    """Markdown links to ``paths``, named by them."""
    return ", ".join(f"[`{path}`]({path})" for path in paths)


def section(run: Run, heading: str) -> str:
    """A run's block: heading, what was measured, command, commit, machine, tables, data, plots."""
    machine = run.machine if isinstance(run.machine, str) else describe_machine(run.machine)
    lines = [heading, "", run.measured.strip(), ""]
    lines.append(f"- Command: `{run.command}`")
    lines.append(f"- Commit: {run.commit or commit_line(run.machine)}")
    lines.append(f"- Machine: {machine}")
    lines += list(run.more)
    if run.tables:
        lines.append(f"- Tables: {links(run.tables)}")
    if run.data:
        lines.append(f"- Data: {links(run.data)}")
    lines.append("")
    for plot in run.plots:
        lines += [f"![{Path(plot).stem}]({plot})", ""]
    return "\n".join(lines)


def split(text: str) -> tuple[str, list[tuple[str, str]]]:
    """A README's header (title and summary) and its ``## `` sections as (heading, text), the
    findings section left out where it is only the link to ``notes.md``."""
    header, sections = [], []
    for line in text.splitlines():
        if line.startswith("## "):
            sections.append((line, [line]))
        elif sections:
            sections[-1][1].append(line)
        else:
            header.append(line)
    blocks = [(title, "\n".join(body).strip() + "\n") for title, body in sections]
    blocks = [(title, body) for title, body in blocks if body != f"{FINDINGS}\n\n{NOTES}\n"]
    return "\n".join(header).strip() + "\n", blocks


def result_folder(path: str | Path) -> Path:
    """``results/<name>`` for a path at or below it, else ``path`` itself."""
    path = Path(path).resolve()
    if path.is_relative_to(RESULTS) and path != RESULTS:
        return RESULTS / path.relative_to(RESULTS).parts[0]
    return path


def write_readme(folder: str | Path, run: Run) -> Path:
    """Write the README.md of the result folder of ``folder`` (where the run wrote its files; the
    run's paths are relative to it) atomically with ``run`` in it; returns its path.

    A new README, or one of this run alone, is the run's page. In a README of several runs (``## ``
    sections under the folder's title and summary), ``run`` replaces the section whose tables
    begin with its first table, or is added last under its title; the headings, the folder's
    summary and the other sections stay.
    """
    home = result_folder(folder)
    below = Path(folder).resolve().relative_to(home)
    run = replace(run, **{
        kind: [(below / path).as_posix() for path in getattr(run, kind)]
        for kind in ("tables", "data", "plots")
    })  # fmt: skip
    readme = home / "README.md"
    header, sections = split(readme.read_text()) if readme.is_file() else ("", [])
    mine = f"- Tables: {links(run.tables[:1])}" if run.tables else None

    def holds(text: str) -> bool:  # an earlier run of this page: its section keeps its heading
        return mine is not None and any(line.startswith(mine) for line in text.splitlines())

    title = header.splitlines()[0] if header.strip() else f"# {run.title}"
    if not sections and (not header.strip() or holds(header)):  # a folder of this run alone
        text = section(run, title)
    else:
        heading = next((heading for heading, body in sections if holds(body)), f"## {run.title}")
        kept = dict(sections)
        kept[heading] = section(run, heading)
        text = header + "".join("\n" + body for body in kept.values())
    if (home / "notes.md").is_file():
        text = text.rstrip("\n") + f"\n\n{FINDINGS}\n\n{NOTES}\n"
    write_text_atomic(readme, text.rstrip("\n") + "\n")
    return readme


def write_result(
    folder: Path, stem: str, text: str, record: dict, *, title: str, measured: str, command: str, machine: str
) -> None:
    """A run's page ``<stem>.md`` and its data ``<stem>.json`` written atomically into ``folder``,
    and its section of the result folder's README (:func:`write_readme`)."""
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / f"{stem}.md", text)
    write_text_atomic(folder / f"{stem}.json", json.dumps(record, indent=2))
    write_readme(folder, Run(title, measured, command, machine, [f"{stem}.md"], [f"{stem}.json"]))
