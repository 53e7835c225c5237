"""Artifacts are written atomically: readers see the old file or the new one, never half. A JSON-lines
file appended while a run goes on is read back whole, less a last line the run was still writing."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


def write_atomic(path: str | Path, write: Callable[[str], None]) -> None:
    """Have ``write`` fill a temporary file in ``path``'s directory (it gets the file's name), then
    rename it to ``path``: readers see the old file or the new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes it private
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory and a rename."""
    write_atomic(path, lambda tmp: Path(tmp).write_text(text))


def write_report(stem: str | Path, report: dict, markdown: str) -> None:
    """A result's ``stem.json`` (the report) and ``stem.md`` (its page), each written atomically."""
    stem = Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(stem.with_suffix(".json"), json.dumps(report, indent=1) + "\n")
    write_text_atomic(stem.with_suffix(".md"), markdown)


def sha256(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read a megabyte at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def json_lines(path: str | Path) -> Iterator[tuple[int, object]]:
    """(line number, record) of each non-blank line of a JSON-lines file. A last line that ends
    without a newline and does not parse was being appended when its writer stopped: it is left
    out; a complete last line without a newline is read.

    Raises:
        ValueError: a line that is not JSON (names the file and the line).
    """
    text = Path(path).read_text()
    lines = text.split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            if number == len(lines) and not text.endswith("\n"):
                return  # cut short while being written
            raise ValueError(f"{path}, line {number}: not a JSON record ({error})") from None
        yield number, record
