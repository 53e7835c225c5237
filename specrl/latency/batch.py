"""A batch's latency on a device: batched forwards timed alone, calibrated on continuous batching.

A batched step (:mod:`specrl.engine.generation`) of B rows costs ``draft_forwards`` draft forwards
over (B, 1) and one target forward over (B, n), n = the most tokens a row feeds (its last token
and its proposals; the rows are right-padded to n). Both read the batch's whole slot grid
(:class:`~specrl.engine.cache.KVCache`): W slots a row, holes included, which is more than the
rows' mean context once rows have rejected tokens or joined mid-flight (see
:class:`~specrl.engine.grid.SlotGrid`). :func:`measure_batch_latency` measures the
:class:`~specrl.latency.LatencyModel` of kind "batch" that prices it (the module doc there: a grid
of batch sizes, contexts W + 1, scales and prefill coefficients):

1. The forwards are timed in isolation on the device, on a grid of batch sizes, tokens per row
   and widths (each a median of ``repeats``, device-synchronised), through the engine's own cache.
2. Real continuous batching (static k, prompts joining as rows finish) then calibrates the
   rest. At each batch size the ks run in interleaved rounds (forward, then backward), so that
   the machine's drift, which moves a run's speed by up to a tenth on a shared CPU, falls on
   every k alike: at large batches the ks differ by less than that. Per batch size (and tokens
   per row, for verification; linear in n between the ks it ran), the scales are measured over
   modeled seconds of its steps (they hold the engine's own work per row, and the masks of a
   grid with holes, which the isolated forwards do not pay); the prefill coefficients are a
   non-negative least-squares fit over its admissions.

The sampled tables equal the greedy ones (not measured apart), and each draft forward costs the
first's. ``calibrated(pair, method="batch")`` (:mod:`specrl.latency.calibration`) measures once per pair and
device and caches the file next to the single sequence's model.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

import numpy as np
import torch

from specrl.latency.model import LatencyModel, bracket, prefill_terms, step_shape
from specrl.latency.store import device_key, dtype_name, environment
from specrl.models import ModelPair

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_WIDTHS = (32, 160, 320, 480)  # cache widths: prompts, budgets (128 new tokens), holes
CALIBRATION_KS = (0, 1, 2, 4)  # the static k of the real steps that calibrate the model
CALIBRATION_ROUNDS = 3  # interleaved rounds over CALIBRATION_KS at each batch size


@torch.inference_mode()
def _feed_seconds(cache, tokens: torch.Tensor, kept: list[int], clock, repeats: int) -> float:
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


def measure_batch_latency(
    pair: ModelPair,
    *,
    k_max: int = 8,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    widths: Sequence[int] | None = None,
    repeats: int = 3,
    prompts: Sequence[Sequence[int]] | None = None,
    ks: Sequence[int] = CALIBRATION_KS,
    rounds: int = CALIBRATION_ROUNDS,
    max_new_tokens: int = 48,
    progress: bool = True,
) -> LatencyModel:
    """Time the forwards on the grid, then calibrate on real continuous batching of ``prompts``
    (token ids; default: random tokens, 16 to 120 of them) at every batch size and k in ``ks``,
    ``rounds`` interleaved rounds of them."""
    from tqdm.auto import tqdm

    from specrl.engine.cache import KVCache
    from specrl.engine.timing import DeviceClock

    room = pair.context_length - (k_max + 1)
    widths = tuple(widths or sorted({min(w, room) for w in DEFAULT_WIDTHS}))
    clock = DeviceClock(pair.device)
    generator = torch.Generator().manual_seed(0)
    n_tokens = tuple(range(1, k_max + 2))
    target = np.zeros((len(batch_sizes), len(n_tokens), len(widths)))
    draft = np.zeros((len(batch_sizes), len(widths)))
    bar = tqdm(total=len(batch_sizes) * len(widths), desc="batch latency", disable=not progress)
    for i, batch in enumerate(batch_sizes):
        for c, width in enumerate(widths):
            ids = torch.randint(0, pair.vocab_size, (batch, width + k_max + 1), generator=generator)
            ids = ids.to(pair.device)
            kept = [width] * batch
            for model, table in ((pair.target, target), (pair.draft, draft)):
                cache = KVCache(model, pair.vocab_size, rows=batch)
                cache.feed(ids[:, :width], keep=1)
                sizes = n_tokens if table is target else (1,)
                for j, n in enumerate(sizes):
                    seconds = _feed_seconds(cache, ids[:, width : width + n], kept, clock, repeats)
                    if table is target:
                        target[i, j, c] = seconds
                    else:
                        draft[i, c] = seconds
            bar.update()
    bar.close()
    alone = LatencyModel(
        pair.name,
        device_key(pair.device),
        [width + 1 for width in widths],  # the model's contexts: a verify after W slots a row
        target,
        draft,
        dtype=dtype_name(pair.dtype),
        batch_sizes=batch_sizes,
        kind="batch",
    )
    if prompts is None:
        rng = np.random.default_rng(0)
        top = min(120, pair.context_length - max_new_tokens - 1)
        count = max(batch_sizes) + max(batch_sizes) // 2
        prompts = [rng.integers(0, pair.vocab_size, rng.integers(min(16, top), top + 1)).tolist()
                   for _ in range(count)]  # fmt: skip
    ks = [k for k in ks if k <= k_max]
    steps, admissions = _real_steps(pair, prompts, batch_sizes, ks, rounds, max_new_tokens, progress)
    draft_scale, verify_scale = _scales(alone, steps)
    greedy = alone.costs["greedy"]
    return LatencyModel(
        alone.pair,
        alone.device,
        alone.contexts,
        greedy.target,
        greedy.draft_first,
        dtype=alone.dtype,
        batch_sizes=alone.batch_sizes,
        kind="batch",
        draft_scale=draft_scale,
        verify_scale=verify_scale,
        prefill=_prefill_fit(admissions),
        measurement={
            **environment(),
            "method": "batch",
            "repeats": repeats,
            "sampled": "not measured: the sampled tables equal the greedy ones",
            "calibration": {
                "ks": list(ks),
                "rounds": rounds,
                "max_new_tokens": max_new_tokens,
                "steps": len(steps),
                "admissions": len(admissions),
                "prompts": len(prompts),
            },
        },
    )


def calibration_runs(batch_sizes: Sequence[int], ks: Sequence[int], rounds: int) -> list[tuple[int, int]]:
    """The (batch size, k) runs that calibrate the model, in order: at each batch size, ``rounds``
    rounds over ``ks``, every other one backwards (k = 0, 1, 2, 2, 1, 0, 0, ...)."""
    ks = list(ks)
    return [
        (batch, k) for batch in batch_sizes for turn in range(rounds) for k in (ks[::-1] if turn % 2 else ks)
    ]


def _real_steps(
    pair: ModelPair,
    prompts: Sequence[Sequence[int]],
    batch_sizes: Sequence[int],
    ks: Sequence[int],
    rounds: int,
    max_new_tokens: int,
    progress: bool,
) -> tuple[list[tuple], list[tuple]]:
    """Continuous batching at each batch size B (B + B // 2 of the prompts, all waiting; a
    finished row's place goes to the next) and static k, in the order of :func:`calibration_runs`:
    every step's (rows, draft forwards, proposals a row is priced at, context, draft seconds,
    verify seconds) and every admission's (prompt lengths, rows before, context before (0 for
    none), seconds); a context is the grid's width plus one."""
    from tqdm.auto import tqdm

    from specrl.engine.generation import Generation
    from specrl.engine.sampling import SamplingConfig
    from specrl.engine.types import Action

    steps, admissions = [], []
    runs = calibration_runs(batch_sizes, ks, rounds)
    for batch, k in tqdm(runs, desc="batch latency: real steps", disable=not progress):
        queue = [list(prompt) for prompt in prompts[: batch + batch // 2]]
        first, queue = queue[:batch], queue[batch:]
        generation = Generation(pair, first, max_new_tokens, SamplingConfig(0.0), stop_at_eos=False)
        admissions.append(([len(p) for p in first], 0, 0, generation.prefill_seconds))
        while not generation.done:
            step = generation.step(Action(k))
            forwards, proposed = step_shape(step.results)
            seconds = (step.draft_seconds, step.verify_seconds)
            steps.append((step.batch_size, forwards, proposed, step.slots + 1, *seconds))
            free = batch - generation.batch_size
            if queue and free:
                joining, queue = queue[:free], queue[free:]
                rows, context = generation.batch_size, generation.target.slots + 1
                before = generation.prefill_seconds
                generation.add(joining)
                seconds = generation.prefill_seconds - before
                admissions.append(([len(p) for p in joining], rows, context, seconds))
    return steps, admissions


def _scales(alone: LatencyModel, steps: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """The steps' measured seconds over their forwards timed alone: for drafting per batch size of
    the grid, for verification per batch size and tokens per row. Each step weighs on the two
    sizes around its own, as the tables interpolate; tokens per row no step fed are linear
    between those fed (the nearest beyond them), and a size no step weighs on takes the nearest
    fitted size's scales."""
    sizes, n = len(alone.batch_sizes), alone.n_max
    draft = np.zeros((2, sizes))  # [measured, modeled][size]
    verify = np.zeros((2, sizes, n))  # [measured, modeled][size, tokens per row]
    for rows, forwards, proposed, context, draft_seconds, verify_seconds in steps:
        b0, b1, t = bracket(alone.batch_sizes, rows)
        modeled = alone.step_seconds(context, forwards, proposed, rows=rows)
        for index, weight in ((b0, 1 - t), (b1, t)):
            if forwards:
                draft[:, index] += weight * np.array([draft_seconds, modeled[0]])
            verify[:, index, proposed] += weight * np.array([verify_seconds, modeled[1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        draft_scale, verify_scale = draft[0] / draft[1], verify[0] / verify[1]
    for b in range(sizes):  # fill each size's tokens per row from those it fed
        fed = np.flatnonzero(verify[1, b] > 0)
        if len(fed):
            tokens = np.arange(1, n + 1)
            verify_scale[b] = np.interp(tokens, tokens[fed], verify_scale[b, fed])
    return _nearest_fitted(draft_scale, draft[1] > 0), _nearest_fitted(verify_scale, verify[1].sum(1) > 0)


def _nearest_fitted(scale: np.ndarray, fitted: np.ndarray) -> np.ndarray:
    """``scale`` with each size that has no data taking the nearest fitted size's (1 if none is)."""
    have = np.flatnonzero(fitted)
    if not len(have):
        return np.ones_like(scale)
    return np.stack([scale[have[np.argmin(np.abs(have - b))]] for b in range(len(scale))])


def _prefill_fit(admissions: list[tuple]) -> tuple[float, float, float, float]:
    """The prefill coefficients: non-negative least squares of the admissions' relative errors
    (a one-prompt join weighs as much as a batch's first prefill)."""
    from scipy.optimize import nnls

    terms = np.asarray([prefill_terms(lengths, rows, context) for lengths, rows, context, _ in admissions])
    seconds = np.asarray([seconds for *_, seconds in admissions])
    coefficients, _ = nnls(terms / seconds[:, None], np.ones(len(seconds)))
    return tuple(float(c) for c in coefficients)
