"""k by batch size: the schedule vLLM and TensorRT-LLM ship for batched speculation.

vLLM's ``num_speculative_tokens_per_batch_size`` and TensorRT-LLM's ``draft_len_schedule`` map
the batch size to a number of draft tokens, 0 (no speculation) above a cut-off; for example
``{4: 4, 8: 2, 32: 1}`` drafts 4 tokens up to batch 4, 2 up to 8, 1 up to 32 and none above.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from specrl.engine.types import Action, StepResult
from specrl.features import BATCH_LOG2_NORM, FEATURE_NAMES

BATCH_FEATURE = FEATURE_NAMES.index("batch_size")


class BatchScheduleController:
    """Drafts ``schedule[b]`` tokens at batch sizes up to ``b`` (the smallest such ``b``); 0 above
    the largest. The batch size is read from the observation's ``batch_size`` feature."""

    def __init__(self, schedule: Mapping[int, int], tau: float = 0.0) -> None:
        if not schedule:
            raise ValueError(
                "the schedule is empty: give {largest batch size: k, ...}, e.g. {4: 4, 8: 2, 32: 1}"
            )
        for bound, k in schedule.items():
            if not (isinstance(bound, int) and bound >= 1 and isinstance(k, int) and k >= 0):
                raise ValueError(f"a schedule maps batch sizes >= 1 to k >= 0, got {bound!r}: {k!r}")
        self.schedule = dict(sorted(schedule.items()))
        self.actions = {bound: Action(k, tau) for bound, k in self.schedule.items()}
        self.off = Action(0, tau)

    def k_at(self, batch_size: int) -> int:
        return self.action_at(batch_size).k

    def action_at(self, batch_size: int) -> Action:
        return next((a for bound, a in self.actions.items() if batch_size <= bound), self.off)

    def reset(self) -> None:
        """Nothing to forget: the schedule has no state."""

    def act(self, observation: Any) -> Action:
        batch_size = round(2 ** (float(observation[BATCH_FEATURE]) * BATCH_LOG2_NORM))
        return self.action_at(max(1, batch_size))

    def observe(self, result: StepResult) -> None:
        """Ignores outcomes by design."""

    def __repr__(self) -> str:
        return f"BatchScheduleController({self.schedule})"


def schedule_from_best_k(best_k: Mapping[int, int]) -> dict[int, int]:
    """A schedule from the best k measured at some batch sizes: each size's k holds up to the
    geometric middle between it and the next measured size, the last one's up to that size; 0
    above (nothing was measured there) and above the last size whose best k is positive (merged
    where neighbours agree)."""
    sizes = sorted(best_k)
    schedule: dict[int, int] = {}
    for i, size in enumerate(sizes):
        bound = math.isqrt(size * sizes[i + 1]) if i + 1 < len(sizes) else size  # nothing measured above
        schedule[bound] = int(best_k[size])
    while schedule and list(schedule.values())[-1] == 0:  # 0 above the cut-off is the default
        schedule.pop(list(schedule)[-1])
    merged: dict[int, int] = {}
    for bound, k in schedule.items():  # a run of equal k is one entry, its largest bound
        if merged and list(merged.values())[-1] == k:
            merged.pop(list(merged)[-1])
        merged[bound] = k
    return merged or {1: 0}
