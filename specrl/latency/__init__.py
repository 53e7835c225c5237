"""Latency: seconds of a speculative step's draft and verify, learned per device.

A speculative step of B rows costs ``draft_forwards`` draft forwards over (B, 1) plus one target
forward over (B, ``proposed + 1``) new tokens a row. :meth:`LatencyModel.step_seconds` is the one
definition of a step's modeled time; the envs (one sequence or a batch), the trace simulators and
the oracle use it. Per sampling mode ("greedy", "sampled") and on a grid of batch sizes and
context lengths::

    draft  = 0                                                          if draft_forwards == 0
           = (first(B, ctx) + (draft_forwards - 1) * next(B, ctx)) * draft_scale(B)  otherwise
    verify = target(B, proposed + 1, ctx) * verify_scale(B, proposed + 1)

A single sequence is the batch of one. Ways to measure, same model:

- ``loop`` (the default: :func:`learn`, :func:`calibrated`, ``latency: calibrated``): time
  the engine's own loop of one sequence, greedy and sampled, over every k, and fit the steps;
- ``profiled`` (:func:`profile`, ``latency: profiled``): time each forward in isolation on
  a grid of contexts;
- ``batch`` (:func:`measure_batch_latency`, ``calibrated(method="batch")``, the batch
  simulator's): batched forwards over a grid of batch sizes, calibrated on continuous batching.

The package, one concern per module; each imports only the ones above it in this list:

- :mod:`~specrl.latency.cost_model`: :class:`CostModel`, the constants of the ``constant`` model.
- :mod:`~specrl.latency.fileformat`: the JSON file (format, version, keys, checks, I/O);
  :class:`LatencyError`.
- :mod:`~specrl.latency.model`: :class:`LatencyModel` (tables, interpolation, the step
  formula, the sampling-mode views, markdown).
- :mod:`~specrl.latency.store`: where a calibration is cached (:func:`latency_path`,
  :func:`device_key`).
- :mod:`~specrl.latency.isotonic`: the monotone fits (scipy's isotonic regression).
- :mod:`~specrl.latency.profiling`: :func:`profile`, forwards timed in isolation.
- :mod:`~specrl.latency.records`: :class:`StepRecords`, :func:`record_loop`, steps of the loop.
- :mod:`~specrl.latency.fit`: :func:`fit_records` and :func:`learn`, the loop-learned model.
- :mod:`~specrl.latency.batch`: :func:`measure_batch_latency`, the model over batch sizes.
- :mod:`~specrl.latency.drafters`: :func:`measure_drafter_costs`, each drafter's price relative
  to the draft, measured in the loop.
- :mod:`~specrl.latency.calibration`: :func:`calibrated`, measured once and cached.
- :mod:`~specrl.latency.family`: :class:`LatencyFamily`, the machines a portable policy trains
  over (shipped calibrations, GPU-like profiles, perturbations around each).
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
