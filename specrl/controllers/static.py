"""The same (k, tau, drafter) every iteration."""

from __future__ import annotations

from typing import Any

from specrl.engine.types import DEFAULT_DRAFTER, Action, StepResult


class StaticController:
    """Always proposes up to ``k`` tokens of ``drafter`` with confidence cut ``tau``."""

    def __init__(self, k: int, tau: float = 0.0, drafter: str = DEFAULT_DRAFTER) -> None:
        self.action = Action(k=k, tau=tau, drafter=drafter)

    def reset(self) -> None:
        """Nothing to forget: the rule has no state."""

    def act(self, observation: Any) -> Action:
        return self.action

    def observe(self, result: StepResult) -> None:
        """Ignores outcomes by design."""

    def __repr__(self) -> str:
        drafter = "" if self.action.drafter == DEFAULT_DRAFTER else f", drafter={self.action.drafter!r}"
        return f"StaticController(k={self.action.k}, tau={self.action.tau}{drafter})"
