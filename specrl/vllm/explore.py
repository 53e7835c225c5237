"""A controller that explores, for recording a serving engine's prices over every action.

vLLM's prices (:mod:`specrl.latency.serving`) are fitted from the steps specrl's proposer records.
Steps recorded under one rule (TCP) cover the k it settles on and rarely k = 0, so the fit cannot
tell a plain step's price from a speculative one's, nor how a step grows with the tokens verified.
:class:`Explore` draws each request step's k uniformly from 0..k_max and its drafter uniformly from
the lookup and the draft model (the proposer falls back to the lookup without a draft), so the
recorded steps span the whole action range::

    specrl collect --engine vllm --controller specrl.vllm.explore:Explore ...

Each request's controller draws from its own seeded stream (requests numbered in creation order),
so a recording is reproducible when requests arrive in the same order.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from specrl.engine.types import Action, StepResult
from specrl.features import LOOKUP_DRAFTER
from specrl.vllm.draft import DRAFT

SEED = 53  # the first request's stream
_requests = itertools.count()


class Explore:
    """k uniform on 0..``k_max`` and the drafter uniform on (the draft model, the lookup), each step."""

    def __init__(self, k_max: int = 8, seed: int | None = None) -> None:
        self.k_max = k_max
        self.rng = np.random.default_rng(SEED + next(_requests) if seed is None else seed)

    def reset(self) -> None:
        """Nothing to forget: the draws do not depend on the past."""

    def act(self, observation: Any) -> Action:
        k = int(self.rng.integers(self.k_max + 1))
        drafter = (DRAFT, LOOKUP_DRAFTER)[int(self.rng.integers(2))]
        return Action(k, drafter=drafter)

    def observe(self, result: StepResult) -> None:
        """Ignores outcomes by design."""
