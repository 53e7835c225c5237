"""The pair's calibrated latency model on its device: measured once, then read from the cache.

:func:`calibrated` is what ``latency: calibrated`` in a scenario and the experiment scripts
use; the cache lives at :func:`~specrl.latency.store.latency_path`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from specrl.latency.batch import measure_batch_latency
from specrl.latency.drafters import measure_drafter_costs, with_drafter_costs
from specrl.latency.fileformat import LatencyError
from specrl.latency.fit import learn
from specrl.latency.model import LatencyModel
from specrl.latency.profiling import profile
from specrl.latency.store import latency_path
from specrl.models import ModelPair

METHODS = (
    "loop",
    "profile",
    "batch",
)  # how calibrated() measures: learn(), profile(), measure_batch_latency()


def cached_calibration(pair: Any, *, k_max: int = 8, method: str = "loop") -> LatencyModel | None:
    """The cached file :func:`calibrated` would return without measuring, else None (missing, fewer
    than k_max + 1 new tokens, or unreadable: a warning says so). ``pair`` needs only ``name``,
    ``device`` and ``dtype`` (a :class:`ModelPair`, or a descriptor of one that has no weights
    loaded), so a cached model is found without loading the models."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    path = latency_path(pair, method)
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
) -> LatencyModel:
    """The pair's latency model on its device (greedy view): the cached file
    (:func:`latency_path`), or a fresh one saved there when it is missing, covers fewer than
    k_max + 1 new tokens, is unreadable (another format version included: a warning says so),
    or ``recalibrate`` is set. ``method`` "loop" (default) learns a single sequence's model from
    the loop (:func:`learn`), "profile" profiles forwards in isolation (:func:`profile`),
    "batch" measures the model over batch sizes on continuous batching of ``prompts`` (token
    ids; :func:`~specrl.latency.batch.measure_batch_latency`). Every drafter of ``drafters`` the
    model has no price for is priced in the loop
    (:func:`~specrl.latency.drafters.measure_drafter_costs`) and the file saved again."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    path = latency_path(pair, method)
    model = None if recalibrate else cached_calibration(pair, k_max=k_max, method=method)
    if model is None:
        if method == "loop":
            model = learn(pair, k_max=k_max, progress=progress)
        elif method == "profile":
            model = profile(pair, k_max=k_max, progress=progress)
        else:
            model = measure_batch_latency(pair, k_max=k_max, prompts=prompts, progress=progress)
        model.save(path)
    unpriced = model.unpriced(drafters)
    if unpriced:
        model = with_drafter_costs(model, measure_drafter_costs(pair, unpriced, progress=progress))
        model.save(path)
    return model
