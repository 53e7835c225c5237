"""The controller protocol: asked for (k, tau) before each iteration, told the outcome after."""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from specrl.engine.types import Action, StepResult


@runtime_checkable
class Controller(Protocol):
    """Chooses how far to speculate. Never reaches into the engine.

    ``act`` receives the observation vector of :mod:`specrl.features` (the same vector the
    envs produce, so a policy trained in an env sees identical inputs online) and returns
    an :class:`Action`. ``observe`` receives the :class:`StepResult` of that action.
    """

    def reset(self) -> None: ...

    def act(self, observation: Any) -> Action: ...

    def observe(self, result: StepResult) -> None: ...
