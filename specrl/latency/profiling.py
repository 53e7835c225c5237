"""The profiled latency model: each forward timed in isolation on a grid of contexts.

The second way to measure (scenario ``latency: profiled``, ``calibrate.py --method profile``;
the default is the loop, :mod:`specrl.latency.fit`): time each forward in isolation (real KV
cache, fed and rolled back) on a grid of contexts up to the window. Faster to extend to long
contexts and independent of the prompts, but it prices long drafts too high (every draft
forward is priced as a first one) and misses sampling (the sampled tables equal the greedy
ones).

How (:func:`profile`): for each context length of a grid it prefills random token ids, then
times target forwards over n = 1..k_max + 1 new tokens and single-token draft forwards,
rolling the caches back after each; one untimed warm-up pass, then every repeat visits every
(context, n) in a rotated order; a cell is the median over repeats, made monotone in n and in
the context by isotonic regression (:mod:`specrl.latency.isotonic`); the midpoints between
grid contexts are measured for the held-out error.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from specrl.engine.cache import KVCache
from specrl.engine.sampling import SamplingConfig
from specrl.engine.timing import DeviceClock
from specrl.latency.isotonic import isotonic
from specrl.latency.model import LatencyModel, fit_error_line
from specrl.latency.store import device_key, dtype_name, environment
from specrl.models import ModelPair

# The default profiling grid starts here, doubles, and stops at this cap (clamped beyond).
SMALLEST_GRID_CONTEXT = 16
LARGEST_DEFAULT_CONTEXT = 4096
INCLUDED = (
    "model forward (last n logits), SamplingConfig.probs (greedy), one value read back to the host; "
    "not cache rollback or the engine's bookkeeping"
)


def default_contexts(context_window: int, k_max: int) -> list[int]:
    """16, 32, 64, ... doubling, then the largest usable context (the window minus k_max + 1,
    at most 4096; the model is clamped beyond its last point)."""
    limit = min(context_window - (k_max + 1), LARGEST_DEFAULT_CONTEXT)
    if limit < 1:
        raise ValueError(
            f"context window {context_window} leaves no room to verify k_max + 1 = {k_max + 1} tokens"
        )
    grid, context = [], SMALLEST_GRID_CONTEXT
    while context < limit:
        grid.append(context)
        context *= 2
    return grid + [limit]


def heldout_contexts(contexts: Sequence[int]) -> list[int]:
    """The midpoints between consecutive grid contexts (where interpolation is least exact)."""
    return [(a + b) // 2 for a, b in zip(contexts, contexts[1:], strict=False) if b - a >= 2]


def _relative_error(fitted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    errors = np.abs(fitted - measured) / measured
    return {"median": float(np.median(errors)), "max": float(errors.max())}


@torch.inference_mode()
def profile(
    pair: ModelPair,
    *,
    k_max: int = 8,
    contexts: Sequence[int] | None = None,
    repeats: int = 5,
    progress: bool = True,
) -> LatencyModel:
    """Measure the pair's forward latencies in isolation and fit a :class:`LatencyModel` (kind
    "profiled": every draft forward priced alike, sampled = greedy; see the module doc).

    Args:
        pair: the loaded pair; its device and dtype are what is measured.
        k_max: the largest k to model; target forwards over 1..k_max + 1 tokens are timed.
        contexts: the grid of context lengths (default :func:`default_contexts`); the midpoints
            between them are measured too, for the held-out fit error.
        repeats: timed passes; each cell is the median over them.
        progress: show a tqdm bar and print the held-out fit error.
    """
    from tqdm import tqdm

    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    n_max = k_max + 1
    grid = sorted(set(contexts)) if contexts is not None else default_contexts(pair.context_length, k_max)
    largest = pair.context_length - n_max
    if not grid or grid[0] < 1 or grid[-1] > largest:
        raise ValueError(
            f"contexts must lie in 1..{largest} (the context window {pair.context_length} minus "
            f"k_max + 1 = {n_max} verified tokens), got {list(contexts or [])}"
        )
    heldout = [c for c in heldout_contexts(grid) if c not in grid]
    points = grid + heldout

    clock = DeviceClock(pair.device)
    sampling = SamplingConfig()  # greedy: what a forward's output processing costs at least
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, pair.vocab_size, (1, grid[-1] + n_max), generator=generator).to(pair.device)
    caches = {}
    for context in points:  # the target holds context - 1 tokens before a verify (engine invariant)
        # the caches the pair's generations keep (a static cache costs otherwise)
        target, draft = (
            KVCache(model, pair.vocab_size, pair.cache, pair.context_length)
            for model in (pair.target, pair.draft)
        )
        if context > 1:
            target.feed(ids[:, : context - 1])
            draft.feed(ids[:, : context - 1])
        caches[context] = (target, draft)

    def time_target(context: int, n: int) -> float:
        target = caches[context][0]
        start = clock.now()
        p = sampling.probs(target.feed(ids[:, context - 1 : context - 1 + n], keep=n))  # (1, n, V)
        p[0, -1].argmax().item()
        seconds = clock.now() - start
        target.rollback([context - 1])
        return seconds

    def time_draft(context: int) -> float:
        draft = caches[context][1]
        start = clock.now()
        q = sampling.probs(draft.feed(ids[:, context - 1 : context])[:, -1])  # (1, V)
        q.max(-1).values.item()
        seconds = clock.now() - start
        draft.rollback([context - 1])
        return seconds

    target_samples = {(c, n): [] for c in points for n in range(1, n_max + 1)}
    draft_samples: dict[int, list[float]] = {c: [] for c in points}
    bar = tqdm(
        total=(repeats + 1) * len(points) * (n_max + 1),
        desc=f"profiling {pair.name}",
        unit="fwd",
        disable=not progress,
    )
    for repeat in range(-1, repeats):  # pass -1 is the untimed warm-up
        shift = repeat % len(points)
        for context in points[shift:] + points[:shift]:
            # Rotate n too, and put the draft at a different place in each pass.
            order = list(range(n_max + 1))
            order = order[repeat % len(order) :] + order[: repeat % len(order)]
            for n in order:
                seconds = time_draft(context) if n == 0 else time_target(context, n)
                if repeat >= 0:
                    (draft_samples[context] if n == 0 else target_samples[(context, n)]).append(seconds)
            bar.update(n_max + 1)
    bar.close()

    def target_medians(cs: list[int]) -> np.ndarray:
        return np.array([[np.median(target_samples[(c, n)]) for c in cs] for n in range(1, n_max + 1)])

    def draft_medians(cs: list[int]) -> np.ndarray:
        return np.array([np.median(draft_samples[c]) for c in cs])

    # Monotone: noise must not make more tokens or a longer context look cheaper (specrl.latency.isotonic).
    # Isotonic regression preserves order, so the pass along the context keeps the rows ordered
    # in n; the running max only removes rounding-level violations of that.
    target_table = np.apply_along_axis(isotonic, 0, target_medians(grid))
    target_table = np.maximum.accumulate(np.apply_along_axis(isotonic, 1, target_table), axis=0)
    draft_table = isotonic(draft_medians(grid))
    measurement = {
        "method": "profile",
        "repeats": repeats,
        "warmup_passes": 1,
        "statistic": "median",
        "fit": "exact in n, piecewise linear in context, clamped; isotonic along n, then context",
        "included": INCLUDED,
        "sampled": "not measured: the sampled tables equal the greedy ones",
        **environment(),
    }
    model = LatencyModel(
        pair.name,
        device_key(pair.device),
        grid,
        target_table,
        draft_table,
        dtype=dtype_name(pair.dtype),
        kind="profiled",
        measurement=measurement,
    )
    if heldout:
        measured_target, measured_draft = target_medians(heldout), draft_medians(heldout)
        fitted_target = np.array([[model.target_seconds(n, c) for c in heldout] for n in range(1, n_max + 1)])
        model.fit_error = {
            "contexts": heldout,
            "target_seconds": measured_target.tolist(),
            "draft_seconds": measured_draft.tolist(),
            "target": _relative_error(fitted_target, measured_target),
            "draft": _relative_error(np.array([model.draft_seconds(c) for c in heldout]), measured_draft),
        }
    if progress:
        print(fit_error_line(model.fit_error))
    return model
