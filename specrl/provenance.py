"""Where a run, a report or an exported policy came from: the git commit of the specrl checkout.

Training (``specrl train``) and the policy writer (:func:`specrl.export.export_policy`)
record it beside the config, the seed and the latency file, as rl-baselines3-zoo does for its run
folders. Only the standard library: importing this never pulls in torch.
"""

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


def _own_checkout(checkout: str | Path | None) -> Path | None:
    """The repository to ask (default: the checkout this specrl is imported from), or None when it
    is not a git checkout of its own: an installed specrl may sit inside some other repository."""
    root = Path(checkout).resolve() if checkout is not None else CHECKOUT
    top = git_output("rev-parse", "--show-toplevel", cwd=root)
    return root if top is not None and Path(top).resolve() == root else None


def git_state(checkout: str | Path | None = None) -> dict:
    """The full commit hash of the specrl checkout and whether its tracked files have changes
    (both None outside a checkout of its own): what a benchmark's report records."""
    root = _own_checkout(checkout)
    if root is None:
        return {"commit": None, "dirty": None}
    status = git_output("status", "--porcelain", "--untracked-files=no", cwd=root)
    return {
        "commit": git_output("rev-parse", "HEAD", cwd=root),
        "dirty": bool(status) if status is not None else None,
    }


def git_commit(checkout: str | Path | None = None) -> str | None:
    """The short commit hash of the specrl checkout, with ``-dirty`` when tracked files have changes.

    Args:
        checkout: the repository to ask; default: the checkout this specrl is imported from.

    Returns:
        e.g. ``"63de04b"`` or ``"63de04b-dirty"``; None outside a git checkout (an installed
        package, a copy without ``.git``) or without git.
    """
    state = git_state(checkout)
    if not state["commit"]:
        return None
    short = git_output("rev-parse", "--short", state["commit"], cwd=_own_checkout(checkout) or CHECKOUT)
    return f"{short}-dirty" if state["dirty"] else short
