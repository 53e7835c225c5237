"""The action mapping of the envs (the ONE place): ``[k, tau_index, stop_index]`` -> an engine Action."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from specrl.engine.types import Action, StopRule

if TYPE_CHECKING:
    from specrl.acceptance import AcceptancePredictor
    from specrl.envs.scenario import Scenario


class InvalidActionError(ValueError):
    """An action outside the env's action space."""


def to_engine_action(
    action: Any, k_max: int, tau_grid: tuple[float, ...], stop_rules: Sequence[StopRule | None] = (None,)
) -> Action:
    """An env action -> the engine's Action. Accepted forms:

    - ``[k, tau_index, stop_index]``: k in 0..k_max, tau = tau_grid[tau_index], the per-token stop
      rule ``stop_rules[stop_index]`` (see :func:`specrl.controllers.stop_rules.stop_rule_table`);
    - ``[k, tau_index]``: the same with stop index 0 (no per-token rule);
    - an :class:`Action` with k <= k_max (any tau in [0, 1] and any stop rule, so that baselines
      with continuous thresholds run unquantised).

    Anything else raises :class:`InvalidActionError`.
    """
    if isinstance(action, Action):
        if action.k > k_max:
            raise InvalidActionError(f"Action(k={action.k}) exceeds this scenario's k_max = {k_max}")
        return action
    array = np.asarray(action)
    if array.shape in ((2,), (3,)) and array.dtype.kind in "iu":
        k, tau_index = int(array[0]), int(array[1])
        stop_index = int(array[2]) if len(array) == 3 else 0
        if 0 <= k <= k_max and 0 <= tau_index < len(tau_grid) and 0 <= stop_index < len(stop_rules):
            return Action(k, tau_grid[tau_index], stop=stop_rules[stop_index])
    sizes = [k_max + 1, len(tau_grid)] + ([len(stop_rules)] if len(stop_rules) > 1 else [])
    stop = f", then 0 <= stop_index < {len(stop_rules)} (optional)" if len(stop_rules) > 1 else ""
    raise InvalidActionError(
        f"invalid action {action!r}: expected integers [k, tau_index] with 0 <= k <= {k_max} and "
        f"0 <= tau_index < {len(tau_grid)}{stop} (action space MultiDiscrete({sizes}), tau grid "
        f"{list(tau_grid)}), or a specrl.Action"
    )


def make_action_space(
    scenario: Scenario, predictor: AcceptancePredictor | None = None
) -> spaces.MultiDiscrete:
    """``MultiDiscrete([k_max + 1, len(tau_grid)])``, plus ``len(stop_grid)`` per-token stop
    thresholds when the env has an acceptance predictor to apply them with."""
    sizes = [scenario.k_max + 1, len(scenario.tau_grid)]
    return spaces.MultiDiscrete(sizes + ([len(scenario.stop_grid)] if predictor is not None else []))
