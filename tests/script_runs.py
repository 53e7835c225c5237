"""Run a script of ``experiments/`` as a user does (``python experiments/NAME.py ...``), in a
subprocess on one thread, with ``SPECRL_HOME`` pointing at the tests' home (the embedded tiny pair
built once, ``tiny_home``). The tests never import a script: they run it and read what it wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_script(name: str, *args: object, home: Path | None = None, cwd: Path | None = None) -> str:
    """Run ``experiments/<name>.py`` with ``args``; fail with its stderr unless it exits 0. Returns
    its standard output."""
    done = script(name, *args, home=home, cwd=cwd)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout


def script(name: str, *args: object, home: Path | None = None, cwd: Path | None = None):
    """The finished :class:`subprocess.CompletedProcess` of ``experiments/<name>.py`` with ``args``."""
    env = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    if home is not None:
        env["SPECRL_HOME"] = str(home)
    command = [sys.executable, str(REPO / "experiments" / f"{name}.py"), *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd or REPO, timeout=600)
