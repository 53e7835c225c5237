"""The action mapping of the envs (the ONE place): ``[k, tau_index, stop_index]`` -> an engine Action."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
from gymnasium import spaces

from specrl.action_layout import action_sizes
from specrl.engine.types import DEFAULT_DRAFTER, Action, StopRule

if TYPE_CHECKING:
    from specrl.acceptance import AcceptancePredictor
    from specrl.envs.scenario import Scenario


class InvalidActionError(ValueError):
    """An action outside the env's action space."""


def to_engine_action(
    action: Any,
    k_max: int,
    tau_grid: tuple[float, ...],
    stop_rules: Sequence[StopRule | None] = (None,),
    drafters: tuple[str, ...] = (DEFAULT_DRAFTER,),
) -> Action:
    """An env action -> the engine's Action. Accepted forms:

    - ``[k, tau_index, stop_index, drafter_index]``: k in 0..k_max, tau = tau_grid[tau_index], the
      per-token stop rule ``stop_rules[stop_index]`` (see
      :func:`specrl.controllers.stop_rules.stop_rule_table`) and the drafter
      ``drafters[drafter_index]``. ``stop_index`` is there only when the env has stop rules, and
      ``drafter_index`` only when it has more than one drafter;
    - ``[k, tau_index]`` for an env with stop rules and one drafter: stop index 0 (no per-token rule);
    - an :class:`Action` with k <= k_max and one of ``drafters`` (any tau in [0, 1] and any stop
      rule, so that baselines with continuous thresholds run unquantised). In an env of one drafter
      an Action of the default drafter drafts with that one: the rules never name a drafter, and
      run on the lookup alone as on the draft (as specrl's vLLM proposer runs them without a draft).

    Anything else raises :class:`InvalidActionError`.
    """
    if isinstance(action, Action):
        if action.k > k_max:
            raise InvalidActionError(f"Action(k={action.k}) exceeds this scenario's k_max = {k_max}")
        if action.drafter == DEFAULT_DRAFTER and len(drafters) == 1:
            action = replace(action, drafter=drafters[0])
        if action.drafter not in drafters:
            raise InvalidActionError(
                f"Action(drafter={action.drafter!r}) is not offered here; the scenario's drafters "
                f"are {list(drafters)}"
            )
        return action
    array = np.asarray(action)
    has_stop, has_drafter = len(stop_rules) > 1, len(drafters) > 1
    full = 3 + has_drafter  # the width with a stop index
    if array.ndim == 1 and len(array) in (full - 1, full) and array.dtype.kind in "iu":
        k, tau_index = int(array[0]), int(array[1])
        stop_index = int(array[2]) if len(array) == full else 0
        drafter_index = int(array[-1]) if has_drafter else 0
        if (
            0 <= k <= k_max
            and 0 <= tau_index < len(tau_grid)
            and 0 <= stop_index < len(stop_rules)
            and 0 <= drafter_index < len(drafters)
        ):
            return Action(
                k, tau_grid[tau_index], stop=stop_rules[stop_index], drafter=drafters[drafter_index]
            )
    sizes = action_sizes(k_max, tau_grid, (0.0,) * len(stop_rules) if has_stop else None, drafters)
    stop = f", then 0 <= stop_index < {len(stop_rules)} (optional)" if has_stop else ""
    drafter = (
        f", then 0 <= drafter_index < {len(drafters)} (drafters {list(drafters)})" if has_drafter else ""
    )
    raise InvalidActionError(
        f"invalid action {action!r}: expected integers [k, tau_index{', stop_index' if has_stop else ''}"
        f"{', drafter_index' if has_drafter else ''}] with 0 <= k <= {k_max} and "
        f"0 <= tau_index < {len(tau_grid)}{stop}{drafter} (action space MultiDiscrete({sizes}), tau grid "
        f"{list(tau_grid)}), or a specrl.Action"
    )


def make_action_space(
    scenario: Scenario, predictor: AcceptancePredictor | None = None
) -> spaces.MultiDiscrete:
    """``MultiDiscrete([k_max + 1, len(tau_grid)])``, plus ``len(stop_grid)`` per-token stop
    thresholds when the env has an acceptance predictor to apply them with, plus the drafter
    index when the scenario offers more than one drafter."""
    stops = scenario.stop_grid if predictor is not None else None
    return spaces.MultiDiscrete(action_sizes(scenario.k_max, scenario.tau_grid, stops, scenario.drafters))


def to_action_indices(
    action: Action,
    k_max: int,
    tau_grid: tuple[float, ...],
    stop_rules: Sequence[StopRule | None] = (None,),
    drafters: tuple[str, ...] = (DEFAULT_DRAFTER,),
) -> np.ndarray | None:
    """The inverse of :func:`to_engine_action`: the env action ``[k, tau_index(, stop_index)(,
    drafter_index)]`` that plays ``action``, or None when the action space has no such action (a
    tau off the grid, a stop rule that is not one of ``stop_rules``). A stop rule matches an entry
    of the table when both are cumulative :class:`~specrl.controllers.stop_rules.AcceptanceThreshold`
    rules of the same predictor and threshold."""
    taus = [i for i, tau in enumerate(tau_grid) if abs(tau - action.tau) < 1e-9]
    if action.k > k_max or not taus or action.drafter not in drafters:
        return None
    stops = [i for i, rule in enumerate(stop_rules) if _same_stop(rule, action.stop)]
    if not stops:
        return None
    indices = [action.k, taus[0]] + [stops[0]] * (len(stop_rules) > 1)
    indices += [drafters.index(action.drafter)] * (len(drafters) > 1)
    return np.asarray(indices, dtype=np.int64)


def _same_stop(rule: StopRule | None, other: StopRule | None) -> bool:
    if rule is None or other is None:
        return rule is other or getattr(rule or other, "threshold", None) == 0
    keys = ("predictor", "threshold", "cumulative")
    return all(hasattr(r, key) for r in (rule, other) for key in keys) and all(
        getattr(rule, key) == getattr(other, key) for key in keys
    )
