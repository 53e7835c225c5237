"""The price of each drafter relative to the draft, measured in the engine's loop.

A :class:`~specrl.latency.LatencyModel` prices a step of drafter d at ``drafter_costs[d]`` times
the draft's seconds for the same drafted positions. :func:`measure_drafter_costs` takes, per
drafter, the median draft seconds per drafted position over the draft's; a drafter's catch-up on
text it has not seen is part of its first step's time, as in the loop.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import DEFAULT_DRAFTER, Action
from specrl.latency.model import LatencyModel
from specrl.latency.records import loop_steps
from specrl.models import ModelPair


def measure_drafter_costs(
    pair: ModelPair,
    drafters: Sequence[str],
    *,
    k: int = 4,
    steps: int = 120,
    warmup_steps: int = 8,
    max_new_tokens: int = 96,
    seed: int = 0,
    progress: bool = True,
) -> dict[str, float]:
    """drafter -> median draft seconds per drafted position over the draft's, for each of
    ``drafters`` other than the draft, from ``steps`` greedy steps per drafter at ``k``, the
    drafters interleaved step by step (:func:`~specrl.latency.records.loop_steps`)."""
    names = [DEFAULT_DRAFTER, *(d for d in dict.fromkeys(drafters) if d != DEFAULT_DRAFTER)]
    if len(names) == 1:
        return {}
    lanes = [(SamplingConfig(), lambda name=name: Action(k, drafter=name)) for name in names]
    recorded = loop_steps(
        pair, lanes, steps * len(names), warmup_steps * len(names), max_new_tokens, seed, progress
    )
    per_position: dict[int, list[float]] = {lane: [] for lane in range(len(names))}
    for lane, _, result in recorded:
        if result.draft_forwards:
            per_position[lane].append(result.draft_seconds / result.draft_forwards)
    reference = statistics.median(per_position[0])
    return {
        name: statistics.median(per_position[lane]) / reference if per_position[lane] else 0.0
        for lane, name in enumerate(names)
        if lane
    }


def with_drafter_costs(model: LatencyModel, costs: dict[str, float]) -> LatencyModel:
    """A copy of ``model`` (both modes) that also prices the drafters of ``costs``."""
    data = model.to_dict()
    data["drafter_costs"] = {**model.drafter_costs, **costs}
    return LatencyModel.from_dict(data).for_sampling(
        None if model.mode == "greedy" else SamplingConfig(temperature=1.0)
    )
