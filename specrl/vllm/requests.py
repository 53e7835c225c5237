"""Which request a vLLM row is: vLLM passes a proposer no request ids, only each row's tokens.

A request is recognised by its whole token history: a row continues the known request whose tokens,
when it was last asked to propose, are exactly the row's tokens before this step. Requests are
filed under their length and last tokens, so a lookup compares whole histories only among requests
that end alike. Two requests are confused only when everything they hold is identical (the same
prompt and the same output so far), and then so is everything their controllers would see.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from specrl.controllers.base import Controller
from specrl.engine.drafters.ngram import NGramIndex
from specrl.engine.types import Action
from specrl.features import FeatureTracker

TAIL = 8  # a request is filed under its length and this many last tokens
FORGET_AFTER = 256  # calls a request may go unseen (preempted, prefilling) before it is forgotten


@dataclass(eq=False)
class ServedRequest:
    """One request's state between steps."""

    tracker: FeatureTracker
    controller: Controller
    index: NGramIndex
    number: int = 0  # its order of arrival in this proposer
    steps: int = 0  # the steps it decoded in so far
    rows: int = 0  # the batch's rows when it last acted
    recorded: bool = False  # its steps are recorded (:mod:`specrl.vllm.recorder`)
    action: Action | None = None  # the last proposal's action, its tokens, their signals
    proposed: list[int] = field(default_factory=list)
    confidences: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    stopped: bool = False
    draft_seconds: float = 0.0
    seen: int = 0  # the propose call that last saw it
    failed: bool = False
    tokens: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))  # its tokens now
    key: tuple[int, bytes] | None = None  # where the book files it

    def lookup_match(self) -> tuple[float, float]:
        """What the n-gram lookup finds now: (tokens it could propose, the order of its match),
        (0, 0) without one (the lookup features, as :meth:`Generation.lookup_match` gives them)."""
        available, order = self.index.found(self.tokens)
        return float(available), float(order)

    def record(
        self, action: Action, drafted: tuple[list[int], list[float], list[float], bool], seconds: float
    ) -> None:
        """What it proposes this step, told to its features when vLLM has verified it."""
        self.action = action
        self.proposed, self.confidences, self.entropies, self.stopped = drafted
        self.draft_seconds = seconds


def _key(tokens: np.ndarray) -> tuple[int, bytes]:
    return len(tokens), tokens[-TAIL:].tobytes()


class RequestBook:
    """The known requests, by whole history (see the module doc)."""

    def __init__(self) -> None:
        self.filed: dict[tuple[int, bytes], list[ServedRequest]] = {}
        self.arrived = 0

    def __iter__(self) -> Iterator[ServedRequest]:
        return (request for filed in self.filed.values() for request in filed)

    def __len__(self) -> int:
        return sum(len(filed) for filed in self.filed.values())

    def find(self, history: np.ndarray, call: int) -> ServedRequest | None:
        """The known request, not yet seen in ``call``, whose tokens were exactly ``history``."""
        for request in self.filed.get(_key(history), ()):
            if request.seen != call and np.array_equal(request.tokens, history):
                return request
        return None

    def file(self, request: ServedRequest, tokens: np.ndarray, call: int) -> None:
        """``request`` holds ``tokens`` now, seen in ``call``; a new one is numbered."""
        if request.key is None:
            request.number, self.arrived = self.arrived, self.arrived + 1
        else:
            self._remove(request)
        request.tokens, request.seen, request.key = tokens, call, _key(tokens)
        self.filed.setdefault(request.key, []).append(request)

    def forget_stale(self, call: int) -> None:
        """Drop requests not seen for :data:`FORGET_AFTER` calls (finished, or gone)."""
        if call % FORGET_AFTER:
            return
        for request in [r for r in self if call - r.seen >= FORGET_AFTER]:
            self._remove(request)

    def _remove(self, request: ServedRequest) -> None:
        filed = self.filed[request.key]
        filed.remove(request)
        if not filed:
            del self.filed[request.key]
