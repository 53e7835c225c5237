"""The seed's drafter-pool rule: draft with the drafter accepted most lately, try the others now and then."""

from __future__ import annotations

from collections import deque
from typing import Any

from specrl.engine.types import Action, StepResult

DEFAULT_POOL = ("draft", "ngram")


class PoolRuleController:
    """Choose the drafter each step by its recent acceptance; k and tau fixed.

    Each drafter keeps the acceptance (accepted / proposed; 0 when it proposed nothing) of its
    last ``window`` steps. A drafter not tried yet goes first; then every ``explore_every``-th
    step (0: never) goes to the drafter used least recently, the others to the best mean
    acceptance (ties: the order given). Deterministic; it looks at acceptance only, as the seed
    describes it, not at what a drafter's token costs: that is what a learned policy can add.
    """

    def __init__(
        self,
        drafters: tuple[str, ...] | list[str] = DEFAULT_POOL,
        k: int = 4,
        tau: float = 0.0,
        window: int = 8,
        explore_every: int = 16,
    ) -> None:
        if not drafters or len(set(drafters)) != len(drafters):
            raise ValueError(f"the pool needs distinct drafter names, got {list(drafters)}")
        if window < 1 or explore_every < 0:
            raise ValueError(f"need window >= 1 and explore_every >= 0, got {window} and {explore_every}")
        self.drafters = tuple(drafters)
        self.actions = {name: Action(k, tau, drafter=name) for name in self.drafters}
        self.window, self.explore_every = window, explore_every
        self.reset()

    def reset(self) -> None:
        self.history: dict[str, deque[float]] = {name: deque(maxlen=self.window) for name in self.drafters}
        self.last_used = dict.fromkeys(self.drafters, -1)
        self.steps = 0

    def choose(self) -> str:
        untried = [name for name in self.drafters if not self.history[name]]
        if untried:
            return untried[0]
        if self.explore_every and self.steps % self.explore_every == self.explore_every - 1:
            return min(self.drafters, key=lambda name: self.last_used[name])
        return max(self.drafters, key=lambda name: sum(self.history[name]) / len(self.history[name]))

    def act(self, observation: Any) -> Action:
        return self.actions[self.choose()]

    def observe(self, result: StepResult) -> None:
        name = result.drafter
        if name in self.history:
            self.history[name].append(result.accepted / result.proposed if result.proposed else 0.0)
            self.last_used[name] = self.steps
        self.steps += 1

    def __repr__(self) -> str:
        action = next(iter(self.actions.values()))
        return (
            f"PoolRuleController(drafters={list(self.drafters)}, k={action.k}, tau={action.tau}, "
            f"window={self.window}, explore_every={self.explore_every})"
        )
