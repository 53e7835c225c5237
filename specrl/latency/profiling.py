"""Forwards timed in isolation: the one timer of :func:`profile` and of the batch model.

:func:`time_forwards` feeds each model's KV cache a context of random tokens, then times target
forwards over 1..k_max + 1 new tokens a row and a one-token draft forward (device-synchronised,
median of repeats after an untimed warm-up), rolling the cache back after each.
:func:`profile` is the ``profiled`` model of one row (``latency: profiled``, ``specrl calibrate
--method profile``): faster to extend to long contexts than the loop, but it misses what the loop
adds between forwards and the cost of sampling (its sampled tables equal the greedy ones, and
every draft forward is priced as a first one). :mod:`specrl.latency.batch` calibrates the same
timings over batch sizes on continuous batching.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
import torch

from specrl.engine.cache import KVCache
from specrl.engine.timing import DeviceClock
from specrl.latency.isotonic import isotonic
from specrl.latency.model import LatencyModel, fit_error_line
from specrl.latency.store import device_key, dtype_name, environment
from specrl.models import ModelPair

# The default profiling grid starts here, doubles, and stops at this cap (clamped beyond).
SMALLEST_GRID_CONTEXT = 16
LARGEST_DEFAULT_CONTEXT = 4096
INCLUDED = (
    "model forward (last n logits), device-synchronised; not sampling, cache rollback or the engine's "
    "bookkeeping"
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


def _feed_seconds(cache: KVCache, tokens: torch.Tensor, kept: list[int], clock: DeviceClock, repeats: int):
    """The median seconds of feeding ``tokens`` to ``cache`` (then cut back to ``kept``), after one
    untimed feed that warms the shape."""
    times = []
    for repeat in range(repeats + 1):
        start = clock.now()
        cache.feed(tokens, keep=tokens.shape[1])  # a verification's logits at every column
        elapsed = clock.now() - start
        cache.rollback(kept)
        if repeat:
            times.append(elapsed)
    return statistics.median(times)


@torch.inference_mode()
def time_forwards(
    pair: ModelPair,
    k_max: int,
    batch_sizes: Sequence[int],
    contexts: Sequence[int],
    repeats: int,
    progress: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """Seconds of target forwards over n = 1..k_max + 1 new tokens a row, (B, n, C), and of a
    one-token draft forward, (B, C), at each batch size and context (the caches hold all but the
    last token of a context, as the engine's do)."""
    from tqdm.auto import tqdm

    clock = DeviceClock(pair.device)
    generator = torch.Generator().manual_seed(0)
    target = np.zeros((len(batch_sizes), k_max + 1, len(contexts)))
    draft = np.zeros((len(batch_sizes), len(contexts)))
    bar = tqdm(total=len(batch_sizes) * len(contexts), desc=f"timing {pair.name}", disable=not progress)
    for i, batch in enumerate(batch_sizes):
        for c, context in enumerate(contexts):
            width = context - 1
            ids = torch.randint(0, pair.vocab_size, (batch, width + k_max + 1), generator=generator)
            ids = ids.to(pair.device)
            for model, sizes in ((pair.target, range(1, k_max + 2)), (pair.draft, (1,))):
                cache = KVCache(model, pair.vocab_size, pair.cache, pair.context_length, rows=batch)
                if width:
                    cache.feed(ids[:, :width], keep=1)
                for n in sizes:
                    seconds = _feed_seconds(cache, ids[:, width : width + n], [width] * batch, clock, repeats)
                    if model is pair.target:
                        target[i, n - 1, c] = seconds
                    else:
                        draft[i, c] = seconds
            bar.update()
    bar.close()
    return target, draft


def _relative_error(fitted: np.ndarray, measured: np.ndarray) -> dict[str, float]:
    errors = np.abs(fitted - measured) / measured
    return {"median": float(np.median(errors)), "max": float(errors.max())}


def profile(
    pair: ModelPair,
    *,
    k_max: int = 8,
    contexts: Sequence[int] | None = None,
    repeats: int = 5,
    progress: bool = True,
) -> LatencyModel:
    """The pair's ``profiled`` model of one row: :func:`time_forwards` on a grid of contexts
    (default :func:`default_contexts`), made monotone in n and in the context by isotonic
    regression; the midpoints between grid contexts are timed too, for the held-out fit error."""
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    grid = sorted(set(contexts)) if contexts is not None else default_contexts(pair.context_length, k_max)
    largest = pair.context_length - (k_max + 1)
    if not grid or grid[0] < 1 or grid[-1] > largest:
        raise ValueError(
            f"contexts must lie in 1..{largest} (the context window {pair.context_length} minus "
            f"k_max + 1 = {k_max + 1} verified tokens), got {list(contexts or [])}"
        )
    heldout = [c for c in heldout_contexts(grid) if c not in grid]
    target, draft = time_forwards(pair, k_max, (1,), grid + heldout, repeats, progress)
    target, draft = target[0], draft[0]
    columns = len(grid)
    # Monotone (specrl.latency.isotonic): along n, then along the context, which keeps the rows
    # ordered in n; the running max only removes rounding-level violations of that.
    target_table = np.apply_along_axis(isotonic, 0, target[:, :columns])
    target_table = np.maximum.accumulate(np.apply_along_axis(isotonic, 1, target_table), axis=0)
    model = LatencyModel(
        pair.name,
        device_key(pair.device),
        grid,
        target_table,
        isotonic(draft[:columns]),
        dtype=dtype_name(pair.dtype),
        kind="profiled",
        measurement={
            "method": "profile",
            "repeats": repeats,
            "warmup_passes": 1,
            "statistic": "median",
            "fit": "exact in n, piecewise linear in context, clamped; isotonic along n, then context",
            "included": INCLUDED,
            "sampled": "not measured: the sampled tables equal the greedy ones",
            **environment(),
        },
    )
    if heldout:
        measured_target, measured_draft = target[:, columns:], draft[columns:]
        fitted_target = np.array([[model.target_seconds(n, c) for c in heldout] for n in range(1, k_max + 2)])
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
