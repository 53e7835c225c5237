"""The one markdown-table writer of every report (results pages, README blocks, TensorBoard text).

A leaf module: it imports nothing from specrl, so any layer may use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: The rule under the header, per column alignment.
ALIGNMENTS = {None: "---", "": "---", "left": ":---", "right": "---:", "center": ":---:"}


def markdown_table(
    header: Sequence[object], rows: Iterable[Sequence[object]], align: Sequence[str | None] | None = None
) -> str:
    """A GitHub markdown table: ``| a | b |``, the rule, then one line per row (no trailing newline).

    Args:
        header: the column titles.
        rows: the cells of each row, in the header's order; written with ``str`` as they are
            (format numbers before, and escape a literal ``|`` as ``\\|``).
        align: per column None (plain ``---``), "left", "right" or "center"; None for all plain.

    Raises:
        ValueError: a row or ``align`` whose length is not the header's, or an unknown alignment.
    """
    align = [None] * len(header) if align is None else list(align)
    if len(align) != len(header):
        raise ValueError(f"align has {len(align)} entries for {len(header)} columns")
    if unknown := [a for a in align if a not in ALIGNMENTS]:
        raise ValueError(f"unknown alignment {unknown[0]!r}; use None, 'left', 'right' or 'center'")
    lines = [_line(header), "|" + "|".join(ALIGNMENTS[a] for a in align) + "|"]
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells for {len(header)} columns: {list(row)!r}")
        lines.append(_line(row))
    return "\n".join(lines)


def _line(cells: Sequence[object]) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"
