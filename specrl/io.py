"""Artifacts are written atomically: readers see the old file or the new one, never half."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
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
