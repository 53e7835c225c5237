"""Where a run or an exported policy came from: the git commit of the specrl checkout.

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


def git_commit(checkout: str | Path | None = None) -> str | None:
    """The short commit hash of the specrl checkout, with ``-dirty`` when tracked files have changes.

    Args:
        checkout: the repository to ask; default: the checkout this specrl is imported from.

    Returns:
        e.g. ``"63de04b"`` or ``"63de04b-dirty"``; None outside a git checkout (an installed
        package, a copy without ``.git``) or without git.
    """
    root = Path(checkout).resolve() if checkout is not None else CHECKOUT
    top = git_output("rev-parse", "--show-toplevel", cwd=root)
    # An installed specrl may sit inside some other repository (a project's venv): not ours.
    if top is None or Path(top).resolve() != root:
        return None
    commit = git_output("rev-parse", "--short", "HEAD", cwd=root)
    if not commit:
        return None
    changes = git_output("status", "--porcelain", "--untracked-files=no", cwd=root)
    return f"{commit}-dirty" if changes else commit
