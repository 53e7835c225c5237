"""The one markdown-table writer of every report; a leaf module any layer may use."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

#: The rule under the header, per column alignment.
ALIGNMENTS = {None: "---", "": "---", "left": ":---", "right": "---:", "center": ":---:"}


def markdown_table(
    header: Sequence[object], rows: Iterable[Sequence[object]], align: Sequence[str | None] | None = None
) -> str:
    """A GitHub markdown table, no trailing newline: cells written with ``str`` (format numbers
    before; escape a literal ``|``), ``align`` per column None, "left", "right" or "center".
    ValueError for a row or ``align`` of another length than the header, or an unknown alignment."""
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
