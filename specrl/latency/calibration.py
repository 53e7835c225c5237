"""The pair's calibrated latency model on its device: measured once, then read from the cache.

:func:`calibrated` is what ``latency: calibrated`` in a scenario and the experiment scripts
use; the cache lives at :func:`~specrl.latency.store.latency_path`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from specrl.features import PriceLine
from specrl.latency.batch import measure_batch_latency
from specrl.latency.drafters import measure_drafter_costs, with_drafter_costs
from specrl.latency.fileformat import LatencyError
from specrl.latency.fit import learn
from specrl.latency.model import LatencyModel
from specrl.latency.profiling import profile
from specrl.latency.store import latency_path
from specrl.models import ModelPair
from specrl.names import CALIBRATION_METHODS as METHODS  # how calibrated() measures
from specrl.provenance import current_load


class CalibrationWarning(UserWarning):
    """A calibration was measured on CPU cores other work shared: it prices that contention."""


def cpu_contention(device: torch.device, load: float | None = None) -> str | None:
    """ "load 3.9 on 2 CPUs, torch on 2 threads" when the last minute's load average (``load``, read
    now if not given) plus torch's threads exceeds the CPUs; None on a GPU or a quiet machine."""
    if device.type != "cpu":
        return None
    load = current_load() if load is None else load
    if load is None:
        return None
    cpus, threads = os.cpu_count() or 1, torch.get_num_threads()
    if load + threads <= cpus + 0.5:
        return None
    return f"load {load:.1f} on {cpus} CPUs, torch on {threads} thread{'s' if threads > 1 else ''}"


def warn_if_contended(pair: ModelPair, path: Path, method: str, loads: Sequence[float | None]) -> None:
    """Warn (:class:`CalibrationWarning`) when the calibration just saved at ``path`` shared its
    cores by the load at its start or its end (the load average lags by a minute)."""
    contended = [c for c in (cpu_contention(pair.device, load) for load in loads if load is not None) if c]
    if contended:
        flags = "--force" if method == "loop" else f"--method {method} --force"
        warnings.warn(
            f"{path.name} was measured while other work shared the CPU "
            f"({contended[-1]}): it prices that contention, not the machine. "
            f"Measure it again on a quiet machine: specrl calibrate {flags}",
            CalibrationWarning,
            stacklevel=3,
        )


def cached_calibration(
    pair: Any, *, k_max: int = 8, method: str = "loop", path: Path | None = None
) -> LatencyModel | None:
    """The file :func:`calibrated` would return without measuring (``path``, by default the cache
    file), else None (missing, fewer than k_max + 1 new tokens, or unreadable: a warning says so).
    ``pair`` needs only ``name``, ``device`` and ``dtype``: no weights are loaded."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    path = latency_path(pair, method) if path is None else path
    if not path.is_file():
        return None
    try:
        model = LatencyModel.load(path)
    except LatencyError as error:
        warnings.warn(f"{error}; measuring again", stacklevel=3)
        return None
    return model if model.n_max >= k_max + 1 else None


def calibrated(
    pair: ModelPair,
    *,
    k_max: int = 8,
    recalibrate: bool = False,
    progress: bool = True,
    method: str = "loop",
    drafters: Sequence[str] = (),
    prompts: Sequence[Sequence[int]] | None = None,
    path: Path | None = None,
    **options: Any,
) -> LatencyModel:
    """The pair's latency model on its device (greedy view): :func:`cached_calibration`, else (or
    with ``recalibrate``) measured by ``method`` (:data:`METHODS`; "batch" on continuous batching
    of ``prompts``, token ids) and saved, with a warning if other work shared the CPU. ``path``:
    the file (default the cache file, :func:`~specrl.latency.store.latency_path`); ``options`` go
    to the measurement (:func:`learn`: ``steps``, ``records``; :func:`profile`: ``contexts``,
    ``repeats``). Every drafter of ``drafters`` the model has no price for is priced in the loop
    (:func:`~specrl.latency.drafters.measure_drafter_costs`) and saved."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    path = latency_path(pair, method) if path is None else path
    model = None if recalibrate else cached_calibration(pair, k_max=k_max, method=method, path=path)
    if model is None:
        load_before = current_load()
        if method == "loop":
            model = learn(pair, k_max=k_max, progress=progress, **options)
        elif method == "profile":
            model = profile(pair, k_max=k_max, progress=progress, **options)
        else:
            model = measure_batch_latency(pair, k_max=k_max, prompts=prompts, progress=progress, **options)
        model.save(path)
        warn_if_contended(pair, path, method, [load_before, current_load()])
    unpriced = model.unpriced(drafters)
    if unpriced:
        model = with_drafter_costs(model, measure_drafter_costs(pair, unpriced, progress=progress))
        model.save(path)
    return model


class MachinePrices:
    """The price features' prior on this machine (:data:`specrl.features.Prices`): a step of one row
    priced by the single-sequence calibration, of more rows by the batch one, each the other's
    stand-in where only one is cached."""

    def __init__(self, loop: LatencyModel | None, batch: LatencyModel | None) -> None:
        if loop is None and batch is None:
            raise ValueError("MachinePrices needs a cached calibration: a single-sequence or a batch one")
        self.loop, self.batch = loop, batch

    def __call__(self, rows: int, context_length: float) -> PriceLine:
        one_row = self.loop if rows == 1 else self.batch
        model = one_row if one_row is not None else (self.batch if rows == 1 else self.loop)
        return model.price_line(rows, context_length)


_WARNED: set[str] = set()
_READ: dict[tuple, MachinePrices | None] = {}


def machine_prices(pair: Any, reader: str = "the controller") -> MachinePrices | None:
    """This machine's prices for ``pair`` from its cached calibrations (:class:`MachinePrices`), or
    None (then a warning, once per process and pair, names ``reader`` and how to calibrate)."""
    paths = (latency_path(pair), latency_path(pair, "batch"))
    key = tuple((str(path), path.stat().st_mtime_ns if path.is_file() else 0) for path in paths)
    if key not in _READ:  # a loop per generation: read each file once while it is unchanged
        loop, batch = cached_calibration(pair), cached_calibration(pair, method="batch")
        _READ[key] = None if loop is None and batch is None else MachinePrices(loop, batch)
    if _READ[key] is not None:
        return _READ[key]
    path = paths[0]
    if str(path) not in _WARNED:
        _WARNED.add(str(path))
        warnings.warn(
            f"{reader} reads this machine's prices, but no calibration of pair {pair.name!r} is cached "
            f"here ({path}): its price features are measured from the steps alone and its verification "
            "curve reads flat. Calibrate once: specrl.latency.calibrated(pair) (or `specrl calibrate`; "
            "add --method batch for batches), or pass "
            "prices=<a latency model>.price_line",
            stacklevel=3,
        )
    return None
