"""A learned controller with a stopwatch on its decisions, for ``experiments/policy_overhead.py``:
each ``act`` call (between two iterations), each call of its per-token stop rule (inside the
draft loop) and each lookup of the text its features make (pool policies)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from specrl.controllers import LearnedController
from specrl.engine.generation import Generation
from specrl.engine.types import Action, StepResult, StopRule


class TimedRule:
    """Delegates to a per-token stop rule and adds the time of each call to the current step's."""

    def __init__(self, rule: StopRule, stop_ns: list[int]) -> None:
        self.rule, self.stop_ns = rule, stop_ns

    def __call__(self, position: int, confidence: float, entropy: float) -> bool:
        start = time.perf_counter_ns()
        stop = self.rule(position, confidence, entropy)
        self.stop_ns[-1] += time.perf_counter_ns() - start
        return stop


class TimedController:
    """Delegates to a controller and records how long each ``act`` took, what it saw, and how
    long the per-token stop calls of each step took (the engine makes them inside the draft loop)."""

    def __init__(self, controller: LearnedController) -> None:
        self.controller = controller
        self.act_ns: list[int] = []
        self.stop_ns: list[int] = []
        self.lookup_ns: list[int] = []  # the lookup feature before each decision (pool policies)
        self.observations: list[np.ndarray] = []
        self._timed: dict[int, Action] = {}  # id of the policy's action -> the same action, timed
        self.drafters = controller.drafters  # the decoder builds the features of these drafters

    def reset(self) -> None:
        self.controller.reset()

    def act(self, observation: Any) -> Action:
        start = time.perf_counter_ns()
        action = self.controller.act(observation)
        self.act_ns.append(time.perf_counter_ns() - start)
        self.stop_ns.append(0)
        self.observations.append(np.array(observation, dtype=np.float32))
        if action.stop is None:
            return action
        timed = self._timed.get(id(action))
        if timed is None:  # the policy's actions are a fixed table: wrap each once
            timed = self._timed[id(action)] = Action(
                action.k, action.tau, TimedRule(action.stop, self.stop_ns), drafter=action.drafter
            )
        return timed

    def observe(self, result: StepResult) -> None:
        self.controller.observe(result)

    def clear(self) -> None:
        """Forget every time and observation recorded so far (after a warm-up)."""
        self.act_ns.clear()
        self.stop_ns.clear()
        self.lookup_ns.clear()
        self.observations.clear()


@contextmanager
def timed_lookups(timed: TimedController) -> Iterator[None]:
    """Within the block, every lookup the decoder's features make (``Generation.lookup_match``)
    is timed into ``timed.lookup_ns``; the untimed method is back afterwards."""
    untimed = Generation.lookup_match

    def lookup_match(generation: Generation) -> tuple[int, int]:
        start = time.perf_counter_ns()
        match = untimed(generation)
        timed.lookup_ns.append(time.perf_counter_ns() - start)
        return match

    Generation.lookup_match = lookup_match
    try:
        yield
    finally:
        Generation.lookup_match = untimed
