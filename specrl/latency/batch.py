"""The batch model: forwards timed alone over batch sizes, calibrated on continuous batching.

A batched step of B rows costs ``draft_forwards`` draft forwards over (B, 1) and one target
forward over (B, n), n the most tokens a row feeds; both read the batch's whole slot grid, holes
included (:class:`~specrl.engine.grid.SlotGrid`), so a step's context is the grid's width plus one.
:func:`measure_batch_latency` builds the :class:`~specrl.latency.LatencyModel` of kind "batch":

1. the forwards timed alone on a grid of batch sizes and widths
   (:func:`~specrl.latency.profiling.time_forwards`);
2. real continuous batching (static k, prompts joining as rows finish) calibrates the rest: per
   batch size (and tokens per row, for verification) the scales of measured over modeled seconds
   (the engine's own work per row and the masks of a grid with holes), and the prefill
   coefficients by non-negative least squares over the admissions. The ks run in interleaved
   rounds (:func:`calibration_runs`), so the machine's drift falls on every k alike.

The sampled tables equal the greedy ones, and each draft forward costs the first's.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specrl.latency.model import LatencyModel, bracket, prefill_terms, step_shape
from specrl.latency.profiling import time_forwards
from specrl.latency.store import device_key, dtype_name, environment
from specrl.models import ModelPair

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_WIDTHS = (32, 160, 320, 480)  # cache widths: prompts, budgets (128 new tokens), holes
CALIBRATION_KS = (0, 1, 2, 4)  # the static k of the real steps that calibrate the model
CALIBRATION_ROUNDS = 3  # interleaved rounds over CALIBRATION_KS at each batch size


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
    room = pair.context_length - (k_max + 1)
    widths = tuple(widths or sorted({min(w, room) for w in DEFAULT_WIDTHS}))
    contexts = [width + 1 for width in widths]  # the model's contexts: a verify after W slots a row
    target, draft = time_forwards(pair, k_max, batch_sizes, contexts, repeats, progress)

    def model(**calibration) -> LatencyModel:
        return LatencyModel(
            pair.name,
            device_key(pair.device),
            contexts,
            target,
            draft,
            dtype=dtype_name(pair.dtype),
            batch_sizes=batch_sizes,
            kind="batch",
            **calibration,
        )

    alone = model()
    if prompts is None:
        rng = np.random.default_rng(0)
        top = min(120, pair.context_length - max_new_tokens - 1)
        count = max(batch_sizes) + max(batch_sizes) // 2
        prompts = [rng.integers(0, pair.vocab_size, rng.integers(min(16, top), top + 1)).tolist()
                   for _ in range(count)]  # fmt: skip
    ks = [k for k in ks if k <= k_max]
    steps, admissions = _real_steps(pair, prompts, batch_sizes, ks, rounds, max_new_tokens, progress)
    draft_scale, verify_scale = _scales(alone, steps)
    return model(
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
