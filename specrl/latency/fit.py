"""The loop-learned latency model: recorded steps (:mod:`specrl.latency.records`) fitted to tables.

:func:`learn` records the pair's loop and fits it; :func:`fit_records` is the fit alone. Per mode,
each group of steps (an n for the verify, a draft length for the draft) is winsorised at median +
8 MAD (a preemption must not move a cost; ordinary jitter stays, as the loop's wall clock has it),
then fitted by least squares (means, since a run's time is the sum of its steps): the verify as
an intercept per n plus a context slope growing linearly in n, the draft as first + (forwards -
1) * next, each a line in the context; every slope >= 0. Lines use every step for every context
and continue to the window. The verify intercepts are made non-decreasing in n unless a decrease
exceeds 3 standard errors (:func:`~specrl.latency.isotonic.tolerant_isotonic`). The held-out
error refits without every fifth episode and compares those episodes' totals.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from specrl.engine.sampling import SamplingConfig
from specrl.latency.fileformat import COST_KEYS, MODES, LatencyError
from specrl.latency.isotonic import tolerant_isotonic
from specrl.latency.model import LatencyModel, fit_error_line
from specrl.latency.records import LOOP_INCLUDED, StepRecords, record_loop
from specrl.latency.store import device_key, dtype_name, environment
from specrl.models import ModelPair


def _winsorize(values: np.ndarray, spread: float = 8.0) -> np.ndarray:
    """Cap values above median + ``spread`` scaled MADs (a preemption, not a forward's cost)."""
    if len(values) == 0:
        return values
    median = np.median(values)
    mad = 1.4826 * np.median(np.abs(values - median))
    return np.minimum(values, median + spread * max(mad, 0.01 * median))


def _nonnegative_lstsq(columns: list[np.ndarray], y: np.ndarray, slopes: Sequence[int]) -> np.ndarray:
    """Least squares of y on ``columns``, the coefficients at indices ``slopes`` kept >= 0 (a
    negative one is fixed at 0 and the rest refitted: a longer context cannot be cheaper)."""
    keep = list(range(len(columns)))
    while True:
        coef = np.zeros(len(columns))
        coef[keep] = np.linalg.lstsq(np.stack([columns[i] for i in keep], 1), y, rcond=None)[0]
        negative = [i for i in slopes if i in keep and coef[i] < 0]
        if not negative:
            return coef
        keep.remove(negative[0])


def _verify_lines(
    n: np.ndarray, context: np.ndarray, seconds: np.ndarray, n_max: int, z: float
) -> tuple[np.ndarray, np.ndarray]:
    """(intercepts (n_max,), slopes (n_max,)) of verify seconds = a_n + (b0 + b1 (n - 1)) * ctx,
    b0, b1 >= 0 (attention reads the cache once per new token); the intercepts made
    non-decreasing in n over the steps' residuals, so the rows are ordered at every context."""
    x = context.astype(np.float64)
    columns = [(n == m).astype(np.float64) for m in range(1, n_max + 1)] + [x, (n - 1) * x]
    coef = _nonnegative_lstsq(columns, seconds, slopes=(n_max, n_max + 1))
    slopes = coef[n_max] + coef[n_max + 1] * np.arange(n_max)
    residual = seconds - slopes[n - 1] * x  # each step's cost at context 0
    intercepts = tolerant_isotonic([residual[n == m] for m in range(1, n_max + 1)], z)
    return intercepts, slopes


def _draft_lines(
    context: np.ndarray, forwards: np.ndarray, seconds: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Least squares of draft seconds = first(ctx) + (forwards - 1) * next(ctx), each a line in
    the context with a slope >= 0; returns the (intercept, slope) of first and of next."""
    x, extra = context.astype(np.float64), forwards - 1.0
    coef = _nonnegative_lstsq([np.ones(len(x)), x, extra, extra * x], seconds, slopes=(1, 3))
    return coef[:2], coef[2:]


def _fit_mode(
    records: StepRecords, grid: np.ndarray, n_max: int, significance: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(target (n_max, C), draft first (C,), draft next (C,)) of one mode's steps on ``grid``."""
    verify_n = records.proposed + 1
    for n in range(1, n_max + 1):
        if (verify_n == n).sum() < 3:
            raise LatencyError(
                f"only {int((verify_n == n).sum())} recorded step(s) verify n = {n} tokens: record more steps"
            )
    rows = verify_n <= n_max
    seconds = np.empty(int(rows.sum()))
    for n in range(1, n_max + 1):  # winsorised per n: a long verify is not an outlier of short ones
        seconds[verify_n[rows] == n] = _winsorize(records.verify_seconds[rows][verify_n[rows] == n])
    intercepts, slopes = _verify_lines(verify_n[rows], records.context[rows], seconds, n_max, significance)
    # A verify costs at least the fastest one recorded: on a busy machine the context slope can
    # come out steep enough to take the lines below zero at short contexts (seen on 2 loaded cores).
    target = np.maximum(intercepts[:, None] + slopes[:, None] * grid[None, :], seconds.min())

    rows = records.draft_forwards > 0
    if rows.sum() < 4 or len(np.unique(records.draft_forwards[rows])) < 2:
        raise LatencyError("the recorded steps need drafts of at least two lengths: record more steps")
    forwards = records.draft_forwards[rows]
    # Winsorise per draft length: a long draft is not an outlier of short ones.
    seconds = np.empty(len(forwards))
    for count in np.unique(forwards):
        seconds[forwards == count] = _winsorize(records.draft_seconds[rows][forwards == count])
    first, following = _draft_lines(records.context[rows], forwards, seconds)
    draft = [np.maximum(line[0] + line[1] * grid, 0.0) for line in (first, following)]
    return target, draft[0], draft[1]


def fit_grid(contexts: np.ndarray, knots: int = 5) -> list[int]:
    """Knots of the fit: ``knots`` quantiles (5%..95%) of the recorded contexts, distinct."""
    if len(contexts) == 0:
        raise LatencyError("no steps recorded: nothing to fit")
    quantiles = np.quantile(contexts, np.linspace(0.05, 0.95, knots)) if knots > 1 else [np.median(contexts)]
    return sorted({int(round(q)) for q in quantiles})


def fit_records(
    records: StepRecords,
    *,
    k_max: int,
    context_window: int | None = None,
    knots: int = 5,
    significance: float = 3.0,
) -> tuple[list[int], dict[str, dict[str, Any]]]:
    """Fit the loop model to recorded steps of both modes (the module doc): the context grid
    (``knots`` quantiles of the recorded contexts, then ``context_window`` if given) and mode ->
    the file format's three ``*_seconds`` tables, verifies over 1..k_max + 1 tokens. A verify
    over more tokens may cost less only by more than ``significance`` standard errors."""
    grid = fit_grid(records.context, knots)
    if context_window is not None and context_window > grid[-1]:
        grid.append(int(context_window))
    costs = {}
    for mode in MODES:
        mine = records.select(records.sampled == (mode == "sampled"))
        if len(mine) == 0:
            raise LatencyError(f"no {mode} steps recorded: record both modes")
        tables = _fit_mode(mine, np.array(grid, dtype=np.float64), k_max + 1, significance)
        costs[mode] = dict(zip(COST_KEYS, tables, strict=True))
    return grid, costs


def _model_of_fit(grid: list[int], costs: Mapping[str, Mapping[str, Any]], **info: Any) -> LatencyModel:
    greedy = costs["greedy"]
    return LatencyModel(
        info.pop("pair", "any"),
        info.pop("device", "any"),
        grid,
        greedy["target_seconds"],
        greedy["draft_first_seconds"],
        draft_next_table=greedy["draft_next_seconds"],
        sampled=costs["sampled"],
        kind="loop",
        **info,
    )


def _total_error(modeled: np.ndarray, measured: np.ndarray, rows: np.ndarray) -> float:
    """sum(modeled) / sum(measured) - 1 over ``rows``: how far a run's modeled time is off."""
    return float(modeled[rows].sum() / measured[rows].sum() - 1)


def heldout_error(model: LatencyModel, records: StepRecords) -> dict[str, Any]:
    """Relative error of the modeled totals against the measured ones, per mode: the draft, the
    verify and the step time over all steps, and the step time of the steps of each action k
    (what a static controller at that k would see). ``max`` is the largest |error| of them."""
    report: dict[str, Any] = {"steps": len(records)}
    worst = 0.0
    for mode in MODES:
        mine = records.select(records.sampled == (mode == "sampled"))
        if len(mine) == 0:
            continue
        view = model.for_sampling(SamplingConfig(temperature=float(mode == "sampled")))
        modeled = np.array(
            [
                view.step_seconds(int(c), int(f), int(p))
                for c, f, p in zip(mine.context, mine.draft_forwards, mine.proposed, strict=True)
            ]
        ).reshape(-1, 2)
        measured = np.stack([mine.draft_seconds, mine.verify_seconds], 1)
        step_modeled, step_measured = modeled.sum(1), measured.sum(1)
        by_k = {str(k): _total_error(step_modeled, step_measured, mine.k == k) for k in np.unique(mine.k)}
        entry = {
            "steps": len(mine),
            "draft": float(modeled[:, 0].sum() / measured[:, 0].sum() - 1) if measured[:, 0].sum() else 0.0,
            "verify": float(modeled[:, 1].sum() / measured[:, 1].sum() - 1),
            "step": _total_error(step_modeled, step_measured, np.ones(len(mine), dtype=bool)),
            "step_by_k": by_k,
            "step_median_abs": float(np.median(np.abs(step_modeled / step_measured - 1))),
        }
        worst = max(worst, abs(entry["step"]), *(abs(e) for e in by_k.values()))
        report[mode] = entry
    report["max"] = worst
    return report


def learn(
    pair: ModelPair,
    *,
    k_max: int = 8,
    knots: int = 5,
    progress: bool = True,
    records: StepRecords | None = None,
    **recording: Any,
) -> LatencyModel:
    """Record the pair's loop (:func:`record_loop`, with the options ``recording``) and fit the
    model (:func:`fit_records`); ``records`` skips the recording (steps saved before). The
    held-out error (``fit_error``) comes from a fit without every fifth episode, tested on them."""
    started, recorded = time.perf_counter(), records is None
    if records is None:
        records = record_loop(pair, k_max=k_max, progress=progress, **recording)
    window = pair.context_length - 1  # a step's context is at most the window minus one
    heldout = records.episode % 5 == 4
    fit_error = None
    if heldout.any() and (~heldout).any():
        try:
            partial = _model_of_fit(
                *fit_records(records.select(~heldout), k_max=k_max, context_window=window, knots=knots)
            )
        except LatencyError:
            partial = None  # too few steps without the held-out episodes: report no error
        if partial is not None:
            fit_error = {
                "method": "loop",
                "heldout": "every fifth episode",
                **heldout_error(partial, records.select(heldout)),
            }
    grid, costs = fit_records(records, k_max=k_max, context_window=window, knots=knots)
    measurement = {
        "method": "loop",
        "steps": len(records),
        "sampled_steps": int(records.sampled.sum()),
        "episodes": int(len(np.unique(records.episode))),
        "contexts_recorded": [int(records.context.min()), int(records.context.max())],
        "knots": knots,
        "fit": "winsorised least squares in the piecewise-linear context basis; isotonic along n, then "
        "context; linear extension to the window",
        "included": LOOP_INCLUDED,
        **environment(),
    }
    if recorded:  # the calibration's duration, when it recorded the steps itself
        measurement["seconds"] = round(time.perf_counter() - started, 1)
    model = _model_of_fit(
        grid,
        costs,
        pair=pair.name,
        device=device_key(pair.device),
        dtype=dtype_name(pair.dtype),
        fit_error=fit_error,
        measurement=measurement,
    )
    if progress:
        print(fit_error_line(model.fit_error))
    return model
