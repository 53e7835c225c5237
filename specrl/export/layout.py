"""What a policy folder holds and the checks its writer and reader share: file names, the format
version, the action mapping's validation, checksums, and :class:`PolicyError`."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np

from specrl.features import FEATURE_DRAFTERS
from specrl.home import user_policies_dir

FORMAT_NAME = "specrl-policy"
#: Version of the folder layout and metadata schema; the loader refuses others. Version 1 held a
#: TorchScript ``policy.pt``; version 2 holds a ``torch.export`` program ``policy.pt2``.
FORMAT_VERSION = 2
POLICY_FILE = "policy.pt2"
#: The TorchScript module of format version 1, replaced by :data:`POLICY_FILE`.
LEGACY_POLICY_FILE = "policy.pt"
ONNX_FILE = "policy.onnx"
METADATA_FILE = "metadata.json"
SB3_MODEL_FILE = "sb3_model.zip"
VECNORMALIZE_FILE = "vecnormalize.pkl"
#: Re-exports a folder of an older format from its own checkpoint (:mod:`specrl.export.upgrade`).
UPGRADE_COMMAND = "python -m specrl.export.upgrade"


#: The policies shipped as package data (``specrl/policies/<name>/``): ``LearnedController.load("default")``
#: reads ``default`` here unless the user exported a policy of that name (:func:`policy_folder`).
SHIPPED_POLICY_DIR = Path(__file__).resolve().parents[1] / "policies"
#: Where they lived before they became package data: ``policies/default`` still names the shipped one.
LEGACY_POLICY_FOLDER = "policies"


def shipped_policies() -> list[str]:
    """Names of the policy folders shipped in the package."""
    return sorted(p.name for p in SHIPPED_POLICY_DIR.iterdir() if (p / METADATA_FILE).is_file())


def user_policies() -> list[str]:
    """Names of the policies the user exported (``specrl train --export-as NAME``)."""
    folder = user_policies_dir()
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if (p / METADATA_FILE).is_file())


def policy_folder(name: str | Path) -> Path:
    """The folder a policy name stands for: an existing folder as given; else a bare name such as
    "default" is the user's exported policy of that name (``$SPECRL_HOME/policies/<name>``), then
    the shipped one (from any working directory); "policies/<name>", the path the shipped ones had
    in the repository, names the shipped one. Anything else comes back as given, for the reader's
    "does not exist" error (which lists the known names)."""
    path = Path(name).expanduser()
    if path.is_dir() or path.is_absolute():
        return path
    candidates = []
    if len(path.parts) == 1:
        candidates.append(user_policies_dir() / path.name)
    if len(path.parts) == 1 or (len(path.parts) == 2 and path.parts[0] == LEGACY_POLICY_FOLDER):
        candidates.append(SHIPPED_POLICY_DIR / path.name)
    for folder in candidates:
        if (folder / METADATA_FILE).is_file():
            return folder
    return path


class PolicyError(ValueError):
    """A policy folder cannot be written, read or trusted; the message names the file and the fix."""


def check_action_mapping(k_max: Any, tau_grid: Any) -> tuple[int, tuple[float, ...]]:
    """Validate ``k_max >= 1`` and a non-empty, strictly increasing tau grid in [0, 1].

    Returns:
        ``(k_max, tau_grid)`` as an int and a tuple of floats.

    Raises:
        ValueError: naming the bad value.
    """
    if isinstance(k_max, bool) or not isinstance(k_max, (int, np.integer)) or k_max < 1:
        raise ValueError(f"k_max must be an int >= 1, got {k_max!r}")
    if not isinstance(tau_grid, (list, tuple)) or not tau_grid:
        raise ValueError(f"tau_grid must be a non-empty list of numbers in [0, 1], got {tau_grid!r}")
    if any(isinstance(tau, bool) or not isinstance(tau, (int, float, np.number)) for tau in tau_grid):
        raise ValueError(f"tau_grid must hold numbers, got {list(tau_grid)!r}")
    grid = tuple(float(tau) for tau in tau_grid)
    if any(not 0.0 <= tau <= 1.0 for tau in grid) or any(
        a >= b for a, b in zip(grid, grid[1:], strict=False)
    ):
        raise ValueError(f"tau_grid must be strictly increasing within [0, 1], got {list(grid)}")
    return int(k_max), grid


def check_stop_dimension(stop_grid: Any, predictor: Any) -> tuple[float, ...] | None:
    """Validate the optional stop dimension: a grid starting at 0 (never stop), strictly
    increasing in [0, 1], with the acceptance predictor it applies; both or neither.

    Returns:
        The stop grid as a tuple of floats, or None for a policy without the dimension.

    Raises:
        ValueError: naming the bad value.
    """
    if stop_grid is None and predictor is None:
        return None
    if stop_grid is None or predictor is None:
        raise ValueError("a stop dimension needs both stop_grid and its acceptance predictor")
    if not isinstance(stop_grid, (list, tuple)) or len(stop_grid) < 2:
        raise ValueError(f"stop_grid must list at least two thresholds, got {stop_grid!r}")
    grid = tuple(float(h) for h in stop_grid)
    if grid[0] != 0.0 or any(not 0.0 <= h <= 1.0 for h in grid) or list(grid) != sorted(set(grid)):
        raise ValueError(f"stop_grid must start at 0 and increase strictly within [0, 1], got {list(grid)}")
    return grid


def check_drafters(drafters: Any) -> tuple[str, ...]:
    """Validate the drafters a policy's last action index points into: distinct drafter names
    of :data:`specrl.features.FEATURE_DRAFTERS`, at least one (["draft"] for a policy of one draft).

    Raises:
        ValueError: naming the bad value.
    """
    if not isinstance(drafters, (list, tuple)) or not drafters or len(set(drafters)) != len(drafters):
        raise ValueError(f"drafters must be a non-empty list of distinct drafter names, got {drafters!r}")
    unknown = [d for d in drafters if d not in FEATURE_DRAFTERS]
    if unknown:
        raise ValueError(f"unknown drafter(s) {unknown}; this specrl knows {list(FEATURE_DRAFTERS)}")
    return tuple(str(d) for d in drafters)


def action_sizes(
    k_max: int,
    tau_grid: tuple[float, ...],
    stop_grid: tuple[float, ...] | None,
    drafters: tuple[str, ...] | None = None,
) -> list[int]:
    """The size of each action dimension: k in 0..k_max, the tau index, the stop index if any,
    the drafter index if there is more than one drafter."""
    stops = [len(stop_grid)] if stop_grid else []
    return [k_max + 1, len(tau_grid)] + stops + ([len(drafters)] if drafters and len(drafters) > 1 else [])


def sha256(path: Path) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
