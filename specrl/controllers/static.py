"""The same (k, tau) every iteration."""

from __future__ import annotations

from typing import Any

from specrl.engine.types import Action, StepResult


class StaticController:
    """Always proposes up to ``k`` draft tokens with confidence cut ``tau``."""

    def __init__(self, k: int, tau: float = 0.0) -> None:
        self.action = Action(k=k, tau=tau)

    def reset(self) -> None:
        """Nothing to forget: the rule has no state."""

    def act(self, observation: Any) -> Action:
        return self.action

    def observe(self, result: StepResult) -> None:
        """Ignores outcomes by design."""

    def __repr__(self) -> str:
        return f"StaticController(k={self.action.k}, tau={self.action.tau})"
