"""The action mapping of the envs (the ONE place): ``[k, tau_index]`` -> an engine Action."""

from __future__ import annotations

from typing import Any

import numpy as np

from specrl.engine.types import Action


class InvalidActionError(ValueError):
    """An action outside the env's action space."""


def to_engine_action(action: Any, k_max: int, tau_grid: tuple[float, ...]) -> Action:
    """``[k, tau_index]`` (k in 0..k_max, tau = tau_grid[tau_index]) or an :class:`Action` with
    k <= k_max (any tau in [0, 1], so that baselines with continuous thresholds run
    unquantised) -> the engine's Action. Anything else raises :class:`InvalidActionError`."""
    if isinstance(action, Action):
        if action.k > k_max:
            raise InvalidActionError(f"Action(k={action.k}) exceeds this scenario's k_max = {k_max}")
        return action
    array = np.asarray(action)
    if array.shape == (2,) and array.dtype.kind in "iu":
        k, tau_index = int(array[0]), int(array[1])
        if 0 <= k <= k_max and 0 <= tau_index < len(tau_grid):
            return Action(k, tau_grid[tau_index])
    raise InvalidActionError(
        f"invalid action {action!r}: expected two integers [k, tau_index] with 0 <= k <= {k_max} "
        f"and 0 <= tau_index < {len(tau_grid)} (action space MultiDiscrete([{k_max + 1}, {len(tau_grid)}]), "
        f"tau grid {list(tau_grid)}), or a specrl.Action"
    )
