"""Experiments that compare training runs: ``specrl train`` run once per arm and seed, in a child
process, its exported files kept, so an interrupted experiment resumes where it stopped.

Used by ``experiments/profiles.py``.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path


def kept_run(label: str, seed: int, kept: Path, flags: Sequence[str], files: Sequence[str]) -> Path:
    """``kept``, holding ``files`` of the policy that ``specrl train`` with ``flags`` and ``seed``
    exports (no real-loop check, its run folder and policy in a scratch folder): trained now unless
    ``kept`` holds them already; written atomically (a folder renamed into place)."""
    if all((kept / name).is_file() for name in files):
        return kept
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            sys.executable,
            "-m",
            "specrl",
            "train",
            *flags,
            "--seed",
            str(seed),
            "--validate-scenarios",
            "--runs-dir",
            str(Path(scratch) / "runs"),
            "--export-as",
            str(Path(scratch) / "policy"),
        ]
        print(f"[{label}, seed {seed}] {shlex.join(command[1:])}", flush=True)
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        staged = kept.with_name(f".{kept.name}.tmp")
        shutil.rmtree(staged, ignore_errors=True)
        staged.mkdir(parents=True)
        for name in files:
            shutil.copy(Path(scratch) / "policy" / name, staged / name)
        shutil.rmtree(kept, ignore_errors=True)
        os.replace(staged, kept)
        print(f"[{label}, seed {seed}] {(time.perf_counter() - started) / 60:.1f} minutes", flush=True)
    return kept


def page_footer(command: str, started: float) -> str:
    """The last line of an experiment's page: its ``command``, the minutes since ``started``
    (``time.perf_counter()``; runs kept from an earlier call are not re-run) and the machine."""
    minutes = (time.perf_counter() - started) / 60
    return (
        f"Command: `{command}` ({minutes:.1f} minutes; runs kept from an earlier call are not re-run). "
        f"Machine: {platform.machine()}, {os.cpu_count()} logical CPUs.\n"
    )
