"""Artifacts are written atomically: a failed write leaves the old file and no temporary one."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from specrl.io import json_lines, write_atomic, write_text_atomic


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


def test_json_lines_reads_every_record_and_leaves_out_only_a_last_line_cut_while_written(tmp_path):
    path = tmp_path / "steps.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}')  # a complete last line without its newline is read
    assert list(json_lines(path)) == [(1, {"a": 1}), (3, {"a": 2})]
    path.write_text('{"a": 1}\n{"a": 2}\n{"a": ')  # its writer stopped mid-line
    assert [record for _, record in json_lines(path)] == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\n{"a": \n{"a": 3}\n')  # a broken line elsewhere is an error
    with pytest.raises(ValueError, match=r"steps\.jsonl, line 2: not a JSON record"):
        list(json_lines(path))
    path.write_text('{"a": 1}\n{"a": \n')  # a complete line that does not parse, newline and all
    with pytest.raises(ValueError, match="line 2"):
        list(json_lines(path))
