"""Latency: seconds of a speculative step's draft and verify, learned per device.

:class:`LatencyModel` (:mod:`~specrl.latency.model`) prices a step; its tables come from the
engine's own loop (:func:`learn`, the default, ``latency: calibrated``), forwards timed alone
(:func:`profile`), or forwards timed over batch sizes and calibrated on continuous batching
(:func:`measure_batch_latency`), or vLLM's recorded steps (:func:`fit_serving_latency`);
:func:`calibrated` measures once per device and caches the file
(:mod:`~specrl.latency.fileformat`, :func:`latency_path`). :class:`LatencyFamily` holds the
machines a portable policy trains over.
"""

from specrl.latency.batch import measure_batch_latency
from specrl.latency.calibration import METHODS, CalibrationWarning, cached_calibration, calibrated
from specrl.latency.cost_model import CostModel
from specrl.latency.drafters import measure_drafter_costs
from specrl.latency.family import HELD_OUT, GpuLike, LatencyFamily, perturbed
from specrl.latency.fileformat import LATENCY_FORMAT_VERSION, LatencyError
from specrl.latency.fit import fit_records, learn
from specrl.latency.model import LatencyModel, step_shape
from specrl.latency.profiling import default_contexts, heldout_contexts, profile
from specrl.latency.records import StepRecords, record_loop
from specrl.latency.serving import ServedStep, fit_serving_latency, read_served_steps, write_served_steps
from specrl.latency.store import device_key, latency_path

__all__ = [
    "measure_batch_latency",
    "measure_drafter_costs",
    "CalibrationWarning",
    "cached_calibration",
    "step_shape",
    "CostModel",
    "GpuLike",
    "HELD_OUT",
    "LatencyFamily",
    "perturbed",
    "LATENCY_FORMAT_VERSION",
    "METHODS",
    "LatencyError",
    "LatencyModel",
    "StepRecords",
    "calibrated",
    "default_contexts",
    "device_key",
    "fit_records",
    "heldout_contexts",
    "latency_path",
    "learn",
    "profile",
    "record_loop",
    "ServedStep",
    "fit_serving_latency",
    "read_served_steps",
    "write_served_steps",
]
