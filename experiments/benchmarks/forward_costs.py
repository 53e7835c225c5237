"""The price of one cached forward at a fixed context: the target over 1 and k + 1 new tokens, the
draft over 1, interleaved rep by rep like the generations, medians after a warm-up."""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import torch
from tqdm import tqdm

from specrl.engine.cache import KVCache
from specrl.engine.timing import DeviceClock
from specrl.models import ModelPair

WARMUP = 3


def context_tokens(prompts: Sequence[Sequence[int]], n: int) -> list[int]:
    """At least ``n`` tokens of real text: the prompts concatenated (tiled if short)."""
    pool = [t for prompt in prompts for t in prompt]
    return (pool * (n // len(pool) + 1))[:n]


def measure_forward_costs(
    pair: ModelPair, prompts: Sequence[Sequence[int]], k_values: Sequence[int], context: int, reps: int
) -> dict:
    """Median milliseconds of one cached forward: target at 1 and k+1 new tokens, draft at 1, at
    ``context`` tokens (less if the window is shorter); also the raw times and draft / target."""
    clock = DeviceClock(pair.device)
    widest = max(k_values) + 1
    context = min(context, pair.context_length - widest - 1)
    tokens = torch.tensor([context_tokens(prompts, context + widest)], dtype=torch.long, device=pair.device)
    models = {"target": KVCache(pair.target, pair.vocab_size), "draft": KVCache(pair.draft, pair.vocab_size)}
    for model in models.values():
        model.feed(tokens[:, :context])
    cases = [("target", n) for n in sorted({1, *(k + 1 for k in k_values)})] + [("draft", 1)]
    times: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    for rep in tqdm(range(WARMUP + reps), desc="forwards", unit="rep", dynamic_ncols=True):
        for role, n in cases:
            model = models[role]
            start = clock.now()
            model.feed(tokens[:, context : context + n], keep=n)
            elapsed = clock.now() - start
            model.rollback([context])
            if rep >= WARMUP:
                times[(role, n)].append(elapsed)
    ms = {f"{role}_{n}": 1000 * statistics.median(values) for (role, n), values in times.items()}
    return {
        "context": context,
        "reps": reps,
        "median_ms": ms,
        "draft_over_target": ms["draft_1"] / ms["target_1"],
        "raw_ms": {f"{role}_{n}": [1000 * v for v in values] for (role, n), values in times.items()},
    }
