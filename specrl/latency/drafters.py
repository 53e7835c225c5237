"""The price of each drafter relative to the draft, measured in the engine's loop.

A :class:`~specrl.latency.LatencyModel` prices a step of drafter d at ``drafter_costs[d]`` times
the draft's seconds for the same drafted positions. :func:`measure_drafter_costs` runs the loop
with every drafter on the same prompts, the drafters interleaved step by step (so they share the
machine's noise), and takes, per drafter, the median device-synchronised draft seconds per
drafted position over its steps, divided by the draft's. A drafter's catch-up on text it has not
seen is part of its first step's time, as in the loop; it is not repeated in later steps, since
each drafter here drafts every step of its own generation.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
import torch

from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import DEFAULT_DRAFTER, Action
from specrl.latency.model import LatencyModel
from specrl.latency.records import calibration_prompts
from specrl.models import ModelPair


@torch.inference_mode()
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
    ``drafters`` other than the draft, from ``steps`` greedy steps per drafter at ``k``."""
    from tqdm import tqdm

    from specrl.engine.generation import Generation  # engine -> latency is one way: import late

    names = [DEFAULT_DRAFTER, *(d for d in dict.fromkeys(drafters) if d != DEFAULT_DRAFTER)]
    if len(names) == 1:
        return {}
    prompts = calibration_prompts(pair, np.random.default_rng(seed), room=max_new_tokens)
    live: dict[str, Generation | None] = dict.fromkeys(names)
    started = dict.fromkeys(names, 0)
    per_position: dict[str, list[float]] = {name: [] for name in names}
    total = (warmup_steps + steps) * len(names)
    bar = tqdm(total=total, desc=f"pricing drafters of {pair.name}", unit="step", disable=not progress)
    for done in range(warmup_steps + steps):
        for name in names:  # the drafters step in turn: the same noise for each
            generation = live[name]
            if generation is None or generation.done:
                prompt = prompts[started[name] % len(prompts)]
                generation = live[name] = Generation(
                    pair, [prompt], max_new_tokens, SamplingConfig(), seed=seed + started[name]
                )
                started[name] += 1
            result = generation.step(Action(k, drafter=name)).merged()
            if done >= warmup_steps and result.draft_forwards:
                per_position[name].append(result.draft_seconds / result.draft_forwards)
            bar.update(1)
    bar.close()
    reference = statistics.median(per_position[DEFAULT_DRAFTER])
    return {
        name: statistics.median(per_position[name]) / reference if per_position[name] else 0.0
        for name in names[1:]
    }


def with_drafter_costs(model: LatencyModel, costs: dict[str, float]) -> LatencyModel:
    """A copy of ``model`` (both modes) that also prices the drafters of ``costs``."""
    data = model.to_dict()
    data["drafter_costs"] = {**model.drafter_costs, **costs}
    return LatencyModel.from_dict(data).for_sampling(
        None if model.mode == "greedy" else SamplingConfig(temperature=1.0)
    )
