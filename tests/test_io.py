"""Artifacts are written atomically: a failed write leaves the old file and no temporary one."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from specrl.io import write_atomic, write_text_atomic


def test_a_write_replaces_the_file_whole_and_readable(tmp_path):
    path = tmp_path / "deep" / "report.md"
    write_text_atomic(path, "old")
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and list(path.parent.iterdir()) == [path]
    assert stat.S_IMODE(path.stat().st_mode) == 0o644  # not the temporary file's private mode


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "clone_policy.pt"
    write_atomic(path, lambda tmp: Path(tmp).write_bytes(b"old"))

    def half(tmp: str) -> None:
        Path(tmp).write_bytes(b"ne")
        raise KeyboardInterrupt  # interrupted mid-write

    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, half)
    assert path.read_bytes() == b"old" and list(tmp_path.iterdir()) == [path]
