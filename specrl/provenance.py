"""Where a run, a report or an exported policy came from: the git commit of the specrl checkout
(only the standard library: importing this never pulls in torch)."""

from __future__ import annotations

import subprocess
from pathlib import Path

#: The checkout specrl runs from, when it runs from one (an installed wheel has no repository).
CHECKOUT = Path(__file__).resolve().parents[1]


def git_output(*args: str, cwd: Path = CHECKOUT) -> str | None:
    """``git ARGS`` in ``cwd``: its stripped output, or None where git is missing or fails."""
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(checkout: str | Path | None = None) -> dict:
    """The full commit hash of the specrl checkout (default: the one this specrl is imported from)
    and whether its tracked files have changes; both None outside a checkout of its own (an
    installed specrl may sit inside some other repository) or without git."""
    root = Path(checkout).resolve() if checkout is not None else CHECKOUT
    top = git_output("rev-parse", "--show-toplevel", cwd=root)
    if top is None or Path(top).resolve() != root:
        return {"commit": None, "dirty": None}
    status = git_output("status", "--porcelain", "--untracked-files=no", cwd=root)
    return {
        "commit": git_output("rev-parse", "HEAD", cwd=root),
        "dirty": bool(status) if status is not None else None,
    }


def git_commit(checkout: str | Path | None = None) -> str | None:
    """The short commit hash of the specrl checkout, with ``-dirty`` when tracked files have
    changes (``"63de04b"``, ``"63de04b-dirty"``); None outside a checkout of its own."""
    state = git_state(checkout)
    if not state["commit"]:
        return None
    return state["commit"][:7] + ("-dirty" if state["dirty"] else "")
