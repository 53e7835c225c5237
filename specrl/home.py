"""Where specrl keeps what it builds and what a user trains: ``$SPECRL_HOME``.

- ``embedded/``: the embedded pairs built on this machine;
- ``traces/``, ``latency/``: recorded traces and calibrations (caches);
- ``policies/``: the user's exported policies (``specrl train --export-as NAME``), which
  ``LearnedController.load(NAME)`` reads before the shipped ones.
"""

from __future__ import annotations

import os
from pathlib import Path


def specrl_home() -> Path:
    """``$SPECRL_HOME``, else ``$XDG_CACHE_HOME/specrl``, else ``~/.cache/specrl``."""
    if os.environ.get("SPECRL_HOME"):
        return Path(os.environ["SPECRL_HOME"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "specrl"


def user_policies_dir() -> Path:
    """The user's exported policies, by name: ``$SPECRL_HOME/policies``."""
    return specrl_home() / "policies"
