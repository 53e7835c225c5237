"""Latency: seconds of a speculative step's draft and verify, learned per device.

:class:`LatencyModel` (:mod:`~specrl.latency.model`) prices a step; its tables come from the
engine's own loop (:func:`learn`, the default, ``latency: calibrated``), forwards timed alone
(:func:`profile`), or forwards timed over batch sizes and calibrated on continuous batching
(:func:`measure_batch_latency`); :func:`calibrated` measures once per device and caches the file
(:mod:`~specrl.latency.fileformat`, :func:`latency_path`). :class:`LatencyFamily` holds the
machines a portable policy trains over.
"""

from specrl.latency.batch import measure_batch_latency
from specrl.latency.calibration import METHODS, CalibrationWarning, cached_calibration, calibrated
from specrl.latency.cost_model import CostModel
from specrl.latency.drafters import measure_drafter_costs, with_drafter_costs
from specrl.latency.family import HELD_OUT, GpuLike, LatencyFamily, perturbed
from specrl.latency.fileformat import (
    KINDS,
    LATENCY_FORMAT,
    LATENCY_FORMAT_VERSION,
    MODES,
    LatencyError,
)
from specrl.latency.fit import fit_grid, fit_records, heldout_error, learn
from specrl.latency.model import (
    PLAIN_REFERENCE_CONTEXT,
    ForwardCosts,
    LatencyModel,
    sampling_mode,
    step_shape,
)
from specrl.latency.profiling import (
    INCLUDED,
    LARGEST_DEFAULT_CONTEXT,
    SMALLEST_GRID_CONTEXT,
    default_contexts,
    heldout_contexts,
    profile,
)
from specrl.latency.records import LOOP_INCLUDED, StepRecords, calibration_actions, record_loop
from specrl.latency.store import device_key, latency_path

__all__ = [
    "measure_batch_latency",
    "measure_drafter_costs",
    "CalibrationWarning",
    "cached_calibration",
    "step_shape",
    "with_drafter_costs",
    "CostModel",
    "GpuLike",
    "HELD_OUT",
    "LatencyFamily",
    "perturbed",
    "INCLUDED",
    "KINDS",
    "LARGEST_DEFAULT_CONTEXT",
    "LATENCY_FORMAT",
    "LATENCY_FORMAT_VERSION",
    "LOOP_INCLUDED",
    "METHODS",
    "MODES",
    "PLAIN_REFERENCE_CONTEXT",
    "SMALLEST_GRID_CONTEXT",
    "ForwardCosts",
    "LatencyError",
    "LatencyModel",
    "StepRecords",
    "calibrated",
    "calibration_actions",
    "default_contexts",
    "device_key",
    "fit_grid",
    "fit_records",
    "heldout_contexts",
    "heldout_error",
    "latency_path",
    "learn",
    "profile",
    "record_loop",
    "sampling_mode",
]
