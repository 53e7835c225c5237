"""The layout of the action the envs serve and a policy folder records: its dimensions (k, the tau
index, the optional stop index, the drafter index when there are several) and the checks of the
values that size them. Below the engine, so that the envs, the exported policies and the learned
controller read the one definition (docs/design.md section 1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from specrl.features import FEATURE_DRAFTERS


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
    return int(k_max), check_grid("tau_grid", tau_grid)


def check_grid(key: str, values: Any, from_zero: bool = False) -> tuple[float, ...]:
    """``values`` as a tuple of floats strictly increasing within [0, 1] (starting at 0 when
    ``from_zero``: a stop grid's first threshold never stops); a ValueError naming ``key`` otherwise."""
    grid = tuple(float(value) for value in values)
    start = "start at 0 and " if from_zero else ""
    if (
        not grid
        or (from_zero and grid[0] != 0.0)
        or any(not 0.0 <= value <= 1.0 for value in grid)
        or any(a >= b for a, b in zip(grid, grid[1:], strict=False))
    ):
        raise ValueError(f"{key} must {start}be strictly increasing within [0, 1], got {list(grid)}")
    return grid


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
    return check_grid("stop_grid", stop_grid, from_zero=True)


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
