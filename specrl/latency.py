"""The latency model: seconds of a speculative step's draft and verify, learned per device.

A speculative step costs ``draft_forwards`` single-token draft forwards plus one target
forward over ``proposed + 1`` new tokens (DESIGN.md section 2). :meth:`LatencyModel.step_seconds`
is the one definition of a step's modeled time (:meth:`LatencyModel.step_seconds_array` is the
same for arrays of steps); both envs, the trace simulator and the oracle use it.

The model, per sampling mode ("greedy": temperature 0; "sampled": temperature > 0), on a grid
of context lengths::

    draft  = 0                                              if draft_forwards == 0
           = first(ctx) + (draft_forwards - 1) * next(ctx)  otherwise
    verify = target(proposed + 1, ctx)

The first draft forward after a verification is priced apart from the following ones: in the
loop it is measurably dearer (on the small pair on CPU, 3.05 ms against 2.53 ms for each next
one; likely because the target's forward has just evicted the draft's weights from the CPU
caches, and the draft catches up on two tokens after a full acceptance). The sampled mode has
its own tables: drawing tokens (``torch.multinomial``), the residual distribution and the
uniform draws of the acceptance test cost time that greedy steps do not spend. A model answers
for one mode at a time; :meth:`LatencyModel.for_sampling` gives the one for a scenario's
:class:`~specrl.engine.sampling.SamplingConfig` (the envs call it), and a file holds both.

Two ways to measure, same model:

- ``loop`` (the default, :func:`learn`; what :func:`calibrated` and ``latency: calibrated``
  give): run the engine's own loop (:meth:`Generation.step`) on the pair's train prompts,
  greedy and at temperature 1 interleaved step by step, with actions covering k = 0..k_max
  and a few tau values, after an untimed warm-up; record each step's device-synchronised draft
  and verify seconds (:class:`StepRecords`), and fit (:func:`fit_records`). Why the default:
  it prices what the simulator replaces, the loop's steps, including what isolated forwards
  miss (cache effects between the models, sampling, the engine's per-step work), on the
  machine it will run on.
- ``profiled`` (:func:`profile`; scenario ``latency: profiled``, ``calibrate.py --method
  profile``): time each forward in isolation (real KV cache, fed and rolled back) on a grid
  of contexts up to the window. Faster to extend to long contexts and independent of the
  prompts, but it prices long drafts too high (every draft forward is priced as a first one)
  and misses sampling (the sampled tables equal the greedy ones).

The loop fit, robust and (where noise is the question) monotone. Each group of steps (a mode
and n for the verify; a mode and a draft length for the draft) is winsorised at median + 8 MAD:
an occasional preemption of the process must not move a cost, while ordinary jitter stays,
since the real loop's wall clock contains it too. Then least squares over the steps, means and
not medians, because a run's time is the sum of its steps: the verify as an intercept per n
plus a context slope growing linearly in n (attention reads the cache once per new token);
the draft as first + (forwards - 1) * next, each a line in the context; every slope >= 0.
Lines in the context, not a table per context bin: over the recorded contexts (a prompt plus
up to 192 tokens) the cost is linear within the noise, a line uses every step for every
context, and it continues to the context window (the grid's last point) where no step was
recorded. The verify intercepts are made non-decreasing in n by isotonic regression
(pool-adjacent-violators) with one exception: a decrease larger than 3 standard errors is
kept. Isotonic pooling exists so that noise cannot make more tokens look cheaper (a policy
would exploit it); but on CPUs a verify over, e.g., 5 tokens can really be cheaper than over 3
(the matrix kernels change at vector widths), and pooling a real dip misprices both sizes by
several percent (``fit_records(significance=math.inf)`` pools every violation). The table's
context points are quantiles of the recorded contexts (where the data were) and the window.
Held-out error: the fit is repeated without every fifth episode and its predicted totals are
compared with those episodes' measured ones (per mode, and per action k: what a static
controller would see); ``fit_error`` keeps the numbers.

Profiling (:func:`profile`): for each context length of a grid it prefills random token ids,
then times target forwards over n = 1..k_max + 1 new tokens and single-token draft forwards,
rolling the caches back after each; one untimed warm-up pass, then every repeat visits every
(context, n) in a rotated order; a cell is the median over repeats, made monotone as above;
the midpoints between grid contexts are measured for the held-out error.

Interpolation: exact in n (each n keeps its own row), piecewise linear in the context between
grid points, clamped (constant) outside the grid. Beyond the tabulated n the target cost is
extrapolated linearly from the last two rows.

File format (JSON, ``LATENCY_FORMAT_VERSION`` 2; version 1 files, from isolated profiling
before the loop model, are refused with a message, and :func:`calibrated` measures again)::

    {"format": "specrl-latency", "version": 2, "kind": "loop" | "profiled" | "constant",
     "pair": ..., "device": ..., "dtype": ..., "batch_size": 1,
     "contexts": [c_1 < ... < c_C], "new_tokens": [1, ..., n_max],
     "greedy": {"target_seconds": [[n = 1 at each context], ..., [n = n_max ...]],   # (n_max, C)
                "draft_first_seconds": [at each context],                             # (C,)
                "draft_next_seconds": [at each context]},                             # (C,)
     "sampled": {... the same keys ...},
     "fit_error": null | {...},                                 # see learn() and profile()
     "measurement": {...}}                                      # how it was made

``batch_size`` is 1: only batch 1 is measured for now; the key is there so that a later
version can add a batch dimension without breaking the format.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import platform
import re
import time
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from specrl.engine.cache import CachedModel
from specrl.engine.sampling import SamplingConfig
from specrl.engine.timing import DeviceClock
from specrl.engine.types import Action, StepResult
from specrl.io import write_text_atomic
from specrl.models import ModelPair

if TYPE_CHECKING:  # specrl.envs imports this module: no runtime import back
    from specrl.envs.cost_model import CostModel

LATENCY_FORMAT = "specrl-latency"
LATENCY_FORMAT_VERSION = 2
MODES = ("greedy", "sampled")
KINDS = ("loop", "profiled", "constant")
METHODS = ("loop", "profile")  # how calibrated() measures: learn() or profile()
# plain_tokens_per_s is read at this context: a prompt of ~100 tokens plus a 128-token episode.
PLAIN_REFERENCE_CONTEXT = 256
# The default profiling grid starts here, doubles, and stops at this cap (clamped beyond).
SMALLEST_GRID_CONTEXT = 16
LARGEST_DEFAULT_CONTEXT = 4096
INCLUDED = (
    "model forward (last n logits), SamplingConfig.probs (greedy), one value read back to the host; "
    "not cache rollback or the engine's bookkeeping"
)
LOOP_INCLUDED = (
    "StepResult.draft_seconds and verify_seconds of Generation.step: every draft forward with its "
    "sampling, the verify forward, acceptance, the emitted token's draw and cache rollback"
)
_RECALIBRATE = (
    "re-run `python experiments/calibrate.py` (or delete the file: it is measured again on next use)"
)
_COST_KEYS = ("target_seconds", "draft_first_seconds", "draft_next_seconds")


class LatencyError(ValueError):
    """A latency file or table is invalid, corrupt or from another version; says which and the fix."""


def sampling_mode(sampling: SamplingConfig | None) -> str:
    """ "greedy" for temperature 0 (or None), "sampled" otherwise: the model's two modes."""
    return "greedy" if sampling is None or sampling.greedy else "sampled"


@dataclasses.dataclass(frozen=True)
class ForwardCosts:
    """Seconds of one sampling mode's forwards on a model's context grid (read-only arrays).

    Attributes:
        target: (n_max, C) a verify (target forward) over n = 1..n_max new tokens.
        draft_first: (C,) the first draft forward of a step.
        draft_next: (C,) each further draft forward of the same step.
    """

    target: np.ndarray
    draft_first: np.ndarray
    draft_next: np.ndarray

    @classmethod
    def build(cls, target: Any, draft_first: Any, draft_next: Any | None, columns: int) -> ForwardCosts:
        """Validate shapes and values; ``draft_next`` None means every draft forward costs the first's."""
        target = np.array(target, dtype=np.float64)  # copies: the model owns its tables
        first = np.array(draft_first, dtype=np.float64)
        following = first.copy() if draft_next is None else np.array(draft_next, dtype=np.float64)
        if target.ndim != 2 or target.shape[0] < 2 or target.shape[1] != columns:
            raise LatencyError(
                f"target_seconds must have one row per n = 1..n_max (n_max >= 2) and one "
                f"column per context ({columns}), got shape {target.shape}"
            )
        for name, row in (("draft_first_seconds", first), ("draft_next_seconds", following)):
            if row.shape != (columns,):
                raise LatencyError(
                    f"{name} must have one value per context ({columns}), got shape {row.shape}"
                )
            if not (np.isfinite(row).all() and (row >= 0).all()):
                raise LatencyError(f"{name} must be finite and >= 0")
        if not (np.isfinite(target).all() and (target > 0).all()):
            raise LatencyError("target_seconds must be finite and > 0: a target forward cannot be free")
        for array in (target, first, following):
            array.setflags(write=False)
        return cls(target, first, following)

    def to_dict(self) -> dict[str, Any]:
        return dict(
            zip(
                _COST_KEYS,
                (self.target.tolist(), self.draft_first.tolist(), self.draft_next.tolist()),
                strict=True,
            )
        )


class LatencyModel:
    """Modeled seconds of a step's draft and verify, for one sampling mode (see the module doc).

    Context lengths follow :attr:`StepResult.context_length`: the tokens in the sequence
    before the step. The target's cache then holds all of them but the last, and a verify
    runs one forward over the last emitted token plus the proposals.

    A model holds the tables of both modes and answers for one, :attr:`mode` ("greedy" when
    built or loaded); :meth:`for_sampling` gives the view for another mode (same tables).

    Attributes:
        pair: the pair it was measured for (``ModelPair.name``), or "any" for a constant model.
        device: the device key (:func:`device_key`) it was measured on, or "any".
        dtype: the models' dtype ("float32", ...), or "any".
        batch_size: rows per forward; 1 (the only one measured so far).
        kind: "loop" (:func:`learn`), "profiled" (:func:`profile`) or "constant"
            (:meth:`from_cost_model`).
        mode: the sampling mode this view prices, "greedy" or "sampled".
        contexts: the grid of context lengths, strictly increasing.
        costs: mode -> :class:`ForwardCosts` on that grid.
        fit_error: held-out fit error (see the module doc), or None.
        measurement: how the tables were made (steps or repeats, what is included, versions, ...).
    """

    def __init__(
        self,
        pair: str,
        device: str,
        contexts: Sequence[int],
        target_table: Any,
        draft_table: Any,
        *,
        draft_next_table: Any | None = None,
        sampled: Mapping[str, Any] | None = None,
        dtype: str = "any",
        batch_size: int = 1,
        kind: str = "profiled",
        fit_error: dict[str, Any] | None = None,
        measurement: dict[str, Any] | None = None,
    ) -> None:
        """Build from the greedy tables (``target_table`` (n_max, C), ``draft_table`` the first
        draft forward (C,), ``draft_next_table`` the following ones, default equal to the first)
        and ``sampled``, a mapping with the three ``*_seconds`` keys of the file format (default:
        the greedy tables)."""
        contexts = [int(c) for c in contexts]
        increasing = all(a < b for a, b in zip(contexts, contexts[1:], strict=False))
        if not contexts or contexts[0] < 0 or not increasing:
            raise LatencyError(
                f"contexts must be a non-empty, strictly increasing list of lengths >= 0, got {contexts}"
            )
        if batch_size != 1:
            raise LatencyError(
                f"batch_size {batch_size} is not supported: format version "
                f"{LATENCY_FORMAT_VERSION} models batch 1 only"
            )
        if kind not in KINDS:
            raise LatencyError(f"kind must be one of {KINDS}, got {kind!r}")
        greedy = ForwardCosts.build(target_table, draft_table, draft_next_table, len(contexts))
        if sampled is None:
            costs = {"greedy": greedy, "sampled": greedy}
        else:
            missing = [key for key in _COST_KEYS if key not in sampled]
            if missing:
                raise LatencyError(f"sampled: missing key(s) {missing}")
            costs = {
                "greedy": greedy,
                "sampled": ForwardCosts.build(*(sampled[k] for k in _COST_KEYS), len(contexts)),
            }
        if costs["sampled"].target.shape != greedy.target.shape:
            raise LatencyError(
                f"the sampled target_seconds must have the greedy one's shape {greedy.target.shape}, "
                f"got {costs['sampled'].target.shape}"
            )
        self.pair, self.device, self.dtype = str(pair), str(device), str(dtype)
        self.batch_size, self.kind = batch_size, str(kind)
        self.contexts = tuple(contexts)
        self.costs = costs
        self.mode = "greedy"
        self.fit_error = fit_error
        self.measurement = dict(measurement or {})
        self._grid = np.array(contexts, dtype=np.float64)
        self._views = {"greedy": self}  # mode -> view; shared by all views of these tables
        self._reset_caches()

    def _reset_caches(self) -> None:
        self._tables: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # context -> (first draft, next draft, target by n): see step_seconds
        self._rows: dict[int, tuple[float, float, list[float]]] = {}

    def for_sampling(self, sampling: SamplingConfig | None) -> LatencyModel:
        """The view of this model that prices steps decoded with ``sampling``.

        Greedy settings (temperature 0, or None) give the greedy view, any temperature > 0 the
        sampled one. The views share the tables and are cached: the same call returns the same
        object, and a view of the mode this one already prices is this one.
        """
        mode = sampling_mode(sampling)
        view = self._views.get(mode)
        if view is None:
            view = copy.copy(self)  # shares the read-only tables and the _views dict
            view.mode = mode
            view._reset_caches()
            self._views[mode] = view
        return view

    def __repr__(self) -> str:
        return (
            f"LatencyModel(kind={self.kind!r}, mode={self.mode!r}, pair={self.pair!r}, "
            f"device={self.device!r}, dtype={self.dtype!r}, n_max={self.n_max}, "
            f"contexts={list(self.contexts)})"
        )

    @property
    def n_max(self) -> int:
        """The largest tabulated number of new tokens per target forward (k_max + 1)."""
        return self.target_table.shape[0]

    @property
    def target_table(self) -> np.ndarray:
        """(n_max, C) seconds of a verify over n = 1..n_max tokens, in this view's mode."""
        return self.costs[self.mode].target

    @property
    def draft_table(self) -> np.ndarray:
        """(C,) seconds of the first draft forward of a step, in this view's mode."""
        return self.costs[self.mode].draft_first

    @property
    def draft_next_table(self) -> np.ndarray:
        """(C,) seconds of each further draft forward of a step, in this view's mode."""
        return self.costs[self.mode].draft_next

    # ---- the model: the one vectorised path every method goes through -------------------

    def _interpolate(self, table: np.ndarray, context_lengths: np.ndarray) -> np.ndarray:
        """Rows of ``table`` (..., C) at ``context_lengths`` (L,): piecewise linear, clamped."""
        grid = self._grid
        x = np.clip(context_lengths.astype(np.float64), grid[0], grid[-1])
        if len(grid) == 1:
            return table[..., np.zeros(len(x), dtype=np.intp)]
        right = np.clip(np.searchsorted(grid, x, side="right"), 1, len(grid) - 1)
        left = right - 1
        weight = (x - grid[left]) / (grid[right] - grid[left])
        return table[..., left] + weight * (table[..., right] - table[..., left])

    def _target(self, new_tokens: np.ndarray, context_lengths: np.ndarray) -> np.ndarray:
        """(N, L) seconds of target forwards over ``new_tokens`` (N,) at ``context_lengths`` (L,)."""
        rows = self._interpolate(self.target_table, context_lengths)  # (n_max, L)
        out = np.zeros((len(new_tokens), len(context_lengths)))
        for i, n in enumerate(new_tokens.tolist()):
            if n < 0:
                raise ValueError(f"new_tokens must be >= 0, got {n}")
            if 1 <= n <= self.n_max:
                out[i] = rows[n - 1]
            elif n > self.n_max:  # beyond the table: linear in n from the last two rows
                out[i] = rows[-1] + (n - self.n_max) * (rows[-1] - rows[-2])
        return out

    def _draft(self, context_lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first, next) draft-forward seconds at ``context_lengths`` (L,), each (L,)."""
        return (
            self._interpolate(self.draft_table, context_lengths),
            self._interpolate(self.draft_next_table, context_lengths),
        )

    @staticmethod
    def _check_context(context_length: int) -> None:
        if context_length < 0:
            raise ValueError(f"context_length must be >= 0, got {context_length}")

    # ---- the public interface ---------------------------------------------------------------

    def target_seconds(self, new_tokens: int, context_length: int) -> float:
        """One target forward over ``new_tokens`` tokens after a sequence of ``context_length``.

        0 new tokens cost 0 (no forward).
        """
        self._check_context(context_length)
        return float(self._target(np.array([new_tokens]), np.array([context_length]))[0, 0])

    def draft_seconds(self, context_length: int, forwards: int = 1) -> float:
        """``forwards`` consecutive one-token draft forwards of a step after a sequence of
        ``context_length`` tokens: first + (forwards - 1) * next (0 for none)."""
        self._check_context(context_length)
        if forwards < 0:
            raise ValueError(f"forwards must be >= 0, got {forwards}")
        first, following = (float(v[0]) for v in self._draft(np.array([context_length])))
        return first + (forwards - 1) * following if forwards else 0.0

    def step_seconds(self, context_length: int, draft_forwards: int, proposed: int) -> tuple[float, float]:
        """(draft seconds, verify seconds) of one speculative step. The one definition.

        draft = draft_seconds(context_length, ``draft_forwards``) (one forward per drafted
        position, the tau-stopped one included: :attr:`StepResult.draft_forwards`; the first
        priced apart from the following ones); verify = target_seconds(``proposed`` + 1,
        context_length); both in this view's sampling mode.
        """
        if draft_forwards < 0 or proposed < 0:
            raise ValueError(f"draft_forwards and proposed must be >= 0, got {draft_forwards}, {proposed}")
        # Simulators call this tens of thousands of times a second: the values at a context
        # length are computed once (by the same vectorised path as the other methods) and kept.
        row = self._rows.get(context_length)
        if row is None:
            self._check_context(context_length)
            n = np.arange(self.n_max + 1)
            targets = self._target(n, np.array([context_length]))[:, 0].tolist()
            first, following = (float(v[0]) for v in self._draft(np.array([context_length])))
            row = self._rows[context_length] = (first, following, targets)
        first, following, targets = row
        draft = first + (draft_forwards - 1) * following if draft_forwards else 0.0
        verify = (
            targets[proposed + 1]
            if proposed < self.n_max
            else self.target_seconds(proposed + 1, context_length)
        )
        return draft, verify

    def step_seconds_array(
        self,
        context_lengths: np.ndarray,
        draft_forwards: np.ndarray,
        proposed: np.ndarray,
        context_window: int,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`step_seconds` for arrays of steps at once (the vectorised simulator's path).

        ``context_window`` bounds the context lengths (dense tables up to it are cached).
        Returns (draft seconds, verify seconds), arrays shaped like the inputs, equal to
        :meth:`step_seconds` element by element.
        """
        target, first, following = self._dense(
            context_window, max(self.n_max, int(proposed.max(initial=0)) + 1)
        )
        draft = np.where(
            draft_forwards > 0,
            first[context_lengths] + (draft_forwards - 1) * following[context_lengths],
            0.0,
        )
        return draft, target[proposed + 1, context_lengths]

    def seconds(self, result: StepResult) -> tuple[float, float]:
        """(draft seconds, verify seconds) of an engine step: :meth:`step_seconds` of its counts."""
        return self.step_seconds(result.context_length, result.draft_forwards, result.proposed)

    @property
    def plain_tokens_per_s(self) -> float:
        """Plain decoding throughput: 1 / target_seconds(1, 256), at context 256
        (``PLAIN_REFERENCE_CONTEXT``: a ~100-token prompt plus a 128-token episode)."""
        return 1.0 / self.target_seconds(1, PLAIN_REFERENCE_CONTEXT)

    def tables(self, context_window: int, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Dense lookup tables, equal to the scalar methods element by element.

        Args:
            context_window: the largest context length to tabulate.
            max_new_tokens: the largest number of new tokens per target forward (k_max + 1).

        Returns:
            ``target`` (max_new_tokens + 1, context_window + 1) with ``target[n, ctx]`` =
            target_seconds(n, ctx) (row 0 is zeros), and ``draft`` (context_window + 1,) with
            ``draft[ctx]`` = draft_seconds(ctx), the first draft forward of a step (the
            following ones: :meth:`draft_next_seconds_table`). Read-only and cached.
        """
        target, first, _ = self._dense(context_window, max_new_tokens)
        return target, first

    def draft_next_seconds_table(self, context_window: int) -> np.ndarray:
        """(context_window + 1,) seconds of each draft forward after a step's first. Read-only."""
        return self._dense(context_window, self.n_max)[2]

    def _dense(self, context_window: int, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if context_window < 0 or max_new_tokens < 0:
            raise ValueError(
                f"context_window and max_new_tokens must be >= 0, got {context_window}, {max_new_tokens}"
            )
        key = (int(context_window), int(max_new_tokens))
        if key not in self._tables:
            context_lengths = np.arange(context_window + 1)
            target = self._target(np.arange(max_new_tokens + 1), context_lengths)
            first, following = self._draft(context_lengths)
            for array in (target, first, following):
                array.setflags(write=False)
            self._tables[key] = (target, first, following)
        return self._tables[key]

    # ---- construction -------------------------------------------------------------------------

    @classmethod
    def from_cost_model(
        cls,
        cost_model: CostModel | None = None,
        *,
        pair: str = "any",
        device: str = "any",
        dtype: str = "any",
    ) -> LatencyModel:
        """The constant model (scenario ``latency: constant``): no dependence on the context or
        the sampling mode, target = target_forward_s + target_per_token_s * (n - 1), every draft
        forward draft_forward_s."""
        if cost_model is None:
            from specrl.envs.cost_model import CostModel  # runtime import: envs imports this module

            cost_model = CostModel()
        first, extra = cost_model.target_forward_s, cost_model.target_per_token_s
        # Two rows are enough: the linear extrapolation in n continues them exactly.
        return cls(
            pair,
            device,
            [0],
            [[first], [first + extra]],
            [cost_model.draft_forward_s],
            dtype=dtype,
            kind="constant",
            measurement={"cost_model": dataclasses.asdict(cost_model)},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": LATENCY_FORMAT,
            "version": LATENCY_FORMAT_VERSION,
            "kind": self.kind,
            "pair": self.pair,
            "device": self.device,
            "dtype": self.dtype,
            "batch_size": self.batch_size,
            "contexts": list(self.contexts),
            "new_tokens": list(range(1, self.n_max + 1)),
            **{mode: self.costs[mode].to_dict() for mode in MODES},
            "fit_error": self.fit_error,
            "measurement": self.measurement,
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> LatencyModel:
        """Validate and build (the greedy view); any problem raises :class:`LatencyError` naming
        ``source``."""
        if not isinstance(data, Mapping) or data.get("format") != LATENCY_FORMAT:
            raise LatencyError(
                f'{source}: not a specrl latency file (no "format": "{LATENCY_FORMAT}"); {_RECALIBRATE}'
            )
        version = data.get("version")
        if version != LATENCY_FORMAT_VERSION:
            old = " (an isolated profile, from before the loop-learned model)" if version == 1 else ""
            raise LatencyError(
                f"{source}: latency format version {version!r}{old}, but this specrl reads version "
                f"{LATENCY_FORMAT_VERSION}; {_RECALIBRATE}"
            )
        required = ("kind", "pair", "device", "dtype", "batch_size", "contexts", "new_tokens", *MODES)
        missing = [key for key in required if key not in data]
        if missing:
            raise LatencyError(f"{source}: missing key(s) {missing}; the file is incomplete: {_RECALIBRATE}")
        try:
            for mode in MODES:
                if not isinstance(data[mode], Mapping) or any(key not in data[mode] for key in _COST_KEYS):
                    raise LatencyError(f"'{mode}' must hold {list(_COST_KEYS)}")
            target = data["greedy"]["target_seconds"]
            n_rows = len(target) if isinstance(target, list) else -1
            if data["new_tokens"] != list(range(1, n_rows + 1)):
                raise LatencyError(
                    f"'new_tokens' must be [1, ..., n_max] with one 'target_seconds' row each, got "
                    f"{data['new_tokens']!r} and {n_rows} rows"
                )
            greedy = data["greedy"]
            return cls(
                data["pair"],
                data["device"],
                data["contexts"],
                greedy["target_seconds"],
                greedy["draft_first_seconds"],
                draft_next_table=greedy["draft_next_seconds"],
                sampled=data["sampled"],
                dtype=data["dtype"],
                batch_size=data["batch_size"],
                kind=data["kind"],
                fit_error=data.get("fit_error"),
                measurement=data.get("measurement"),
            )
        except (TypeError, ValueError) as error:  # LatencyError included
            raise LatencyError(f"{source}: {error}; {_RECALIBRATE}") from None

    def save(self, path: str | Path) -> None:
        """Write the JSON file atomically (both modes, whichever view saves it)."""
        write_text_atomic(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> LatencyModel:
        """Read a latency JSON file; :class:`LatencyError` if missing, corrupt or of another version."""
        path = Path(path)
        if not path.is_file():
            raise LatencyError(
                f"latency file '{path}' does not exist; write one with "
                "`python experiments/calibrate.py --out PATH`"
            )
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise LatencyError(f"{path}: not valid JSON ({error}); {_RECALIBRATE}") from None
        return cls.from_dict(data, source=str(path))

    def to_markdown(self) -> str:
        """Per mode: target ms by n x context, draft ms (first, next) by context; the fit error."""
        header = "| n \\ context | " + " | ".join(str(c) for c in self.contexts) + " |"
        rule = "|---:|" + "---:|" * len(self.contexts)
        lines = [
            f"Latency model: pair `{self.pair}`, device `{self.device}`, dtype {self.dtype}, "
            f"batch {self.batch_size} ({self.kind}). Milliseconds.",
        ]
        for mode in MODES:
            costs = self.costs[mode]
            lines += ["", f"**{mode}**: verify (target forward over n new tokens, and what follows it):", ""]
            lines += [header, rule]
            for n, row in enumerate(costs.target, start=1):
                lines.append(f"| {n} | " + " | ".join(f"{1e3 * s:.3f}" for s in row) + " |")
            lines += [
                "",
                f"**{mode}**: draft forwards of a step:",
                "",
                header.replace("n \\ context", "draft"),
                rule,
            ]
            for name, row in (("first", costs.draft_first), ("each next", costs.draft_next)):
                lines.append(f"| {name} | " + " | ".join(f"{1e3 * s:.3f}" for s in row) + " |")
            plain = 1.0 / self.for_sampling(
                SamplingConfig(temperature=float(mode == "sampled"))
            ).target_seconds(1, PLAIN_REFERENCE_CONTEXT)
            lines += [
                "",
                f"Plain decoding ({mode}) at context {PLAIN_REFERENCE_CONTEXT}: {plain:.1f} tokens/s.",
            ]
        lines += ["", _fit_error_line(self.fit_error)]
        return "\n".join(lines) + "\n"


def _fit_error_line(fit_error: dict[str, Any] | None) -> str:
    if not fit_error:
        return "Held-out fit error: n/a (no held-out data)."
    if fit_error.get("method") == "loop":
        parts = []
        for mode in MODES:
            if mode in fit_error:
                entry = fit_error[mode]
                worst_k = max(entry["step_by_k"].values(), key=abs)
                parts.append(
                    f"{mode} step time {100 * entry['step']:+.1f}% (draft {100 * entry['draft']:+.1f}%, "
                    f"verify {100 * entry['verify']:+.1f}%; worst action k {100 * worst_k:+.1f}%; "
                    f"per step median |error| {100 * entry['step_median_abs']:.1f}%)"
                )
        return (
            f"Held-out fit error (modeled / measured total - 1, on {fit_error['steps']} steps of "
            f"{fit_error['heldout']}): "
            + "; ".join(parts)
            + f". Largest |error|: {100 * fit_error['max']:.1f}%."
        )
    target, draft = fit_error["target"], fit_error["draft"]
    return (
        f"Held-out fit error (relative, at contexts {fit_error['contexts']}): target median "
        f"{100 * target['median']:.1f}%, max {100 * target['max']:.1f}%; draft median "
        f"{100 * draft['median']:.1f}%, max {100 * draft['max']:.1f}%."
    )


# ---- devices and the cache -------------------------------------------------------------------


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    return re.sub(r"[^a-z0-9.]+", "-", text).strip("-.") or "unknown"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1]
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def device_key(device: str | torch.device) -> str:
    """A stable, filename-safe name of what latency depends on besides the models.

    "cpu-<cpu model>-<torch threads>threads" (torch's intra-op thread count changes CPU
    latency) or "cuda-<gpu name>"; other device types by their type name.
    """
    device = torch.device(device)
    if device.type == "cpu":
        return f"cpu-{_slug(_cpu_name())}-{torch.get_num_threads()}threads"
    if device.type == "cuda":
        return f"cuda-{_slug(torch.cuda.get_device_name(device))}"
    return _slug(device.type)


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def latency_path(pair: ModelPair, method: str = "loop") -> Path:
    """Where :func:`calibrated` caches the pair's model on this device:
    ``specrl_home()/latency/<pair>__<dtype>__<device key>.json`` (names made filename-safe),
    ``...__profiled.json`` for ``method`` "profile"."""
    from specrl.zoo.build import specrl_home  # the zoo is only needed for its home folder

    suffix = "__profiled" if method == "profile" else ""
    name = f"{_slug(pair.name)}__{_dtype_name(pair.dtype)}__{device_key(pair.device)}{suffix}.json"
    return specrl_home() / "latency" / name


# ---- profiling ----------------------------------------------------------------------------------


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


def _isotonic(values: np.ndarray) -> np.ndarray:
    """The least-squares non-decreasing fit of a sequence (pool adjacent violators)."""
    blocks: list[tuple[float, int]] = []  # (mean, count) of pooled runs, non-decreasing means
    for value in values.tolist():
        mean, count = float(value), 1
        while blocks and blocks[-1][0] > mean:
            previous, previous_count = blocks.pop()
            mean = (previous * previous_count + mean * count) / (previous_count + count)
            count += previous_count
        blocks.append((mean, count))
    return np.array([mean for mean, count in blocks for _ in range(count)])


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
        target, draft = CachedModel(pair.target, pair.vocab_size), CachedModel(pair.draft, pair.vocab_size)
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
        target.rollback(context - 1)
        return seconds

    def time_draft(context: int) -> float:
        draft = caches[context][1]
        start = clock.now()
        q = sampling.probs(draft.feed(ids[:, context - 1 : context])[:, -1])  # (1, V)
        q.max(-1).values.item()
        seconds = clock.now() - start
        draft.rollback(context - 1)
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

    # Monotone: noise must not make more tokens or a longer context look cheaper (module doc).
    # Isotonic regression preserves order, so the pass along the context keeps the rows ordered
    # in n; the running max only removes rounding-level violations of that.
    target_table = np.apply_along_axis(_isotonic, 0, target_medians(grid))
    target_table = np.maximum.accumulate(np.apply_along_axis(_isotonic, 1, target_table), axis=0)
    draft_table = _isotonic(draft_medians(grid))
    measurement = {
        "method": "profile",
        "repeats": repeats,
        "warmup_passes": 1,
        "statistic": "median",
        "fit": "exact in n, piecewise linear in context, clamped; isotonic along n, then context",
        "included": INCLUDED,
        "sampled": "not measured: the sampled tables equal the greedy ones",
        **_environment(),
    }
    model = LatencyModel(
        pair.name,
        device_key(pair.device),
        grid,
        target_table,
        draft_table,
        dtype=_dtype_name(pair.dtype),
        kind="profiled",
        measurement=measurement,
    )
    if heldout:
        measured_target, measured_draft = target_medians(heldout), draft_medians(heldout)
        fitted_target = model._target(np.arange(1, n_max + 1), np.array(heldout))
        model.fit_error = {
            "contexts": heldout,
            "target_seconds": measured_target.tolist(),
            "draft_seconds": measured_draft.tolist(),
            "target": _relative_error(fitted_target, measured_target),
            "draft": _relative_error(model._draft(np.array(heldout))[0], measured_draft),
        }
    if progress:
        print(_fit_error_line(model.fit_error))
    return model


# ---- learning from the loop ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepRecords:
    """Timed steps of the real loop, one entry per step (equal-length arrays).

    Attributes:
        sampled: whether the step decoded at temperature > 0.
        context: :attr:`StepResult.context_length`.
        draft_forwards: :attr:`StepResult.draft_forwards`.
        proposed: :attr:`StepResult.proposed` (the verify covers proposed + 1 tokens).
        k: the k the step used (:attr:`StepResult.k`), for the held-out error per action.
        draft_seconds: measured, device-synchronised seconds of the draft phase.
        verify_seconds: the same of the verify phase.
        episode: which generation the step belongs to (the held-out split is by episode).
    """

    sampled: np.ndarray
    context: np.ndarray
    draft_forwards: np.ndarray
    proposed: np.ndarray
    k: np.ndarray
    draft_seconds: np.ndarray
    verify_seconds: np.ndarray
    episode: np.ndarray

    @classmethod
    def from_steps(cls, steps: Sequence[tuple[StepResult, bool, int]]) -> StepRecords:
        """From (step result, sampled, episode) triples."""
        columns = {
            "sampled": [s for _, s, _ in steps],
            "context": [r.context_length for r, _, _ in steps],
            "draft_forwards": [r.draft_forwards for r, _, _ in steps],
            "proposed": [r.proposed for r, _, _ in steps],
            "k": [r.k for r, _, _ in steps],
            "draft_seconds": [r.draft_seconds for r, _, _ in steps],
            "verify_seconds": [r.verify_seconds for r, _, _ in steps],
            "episode": [e for _, _, e in steps],
        }
        return cls.from_dict(columns)

    @classmethod
    def from_dict(cls, columns: Mapping[str, Sequence]) -> StepRecords:
        """From a mapping of the field names to sequences (what :meth:`to_dict` writes)."""
        kinds = {"sampled": bool, "draft_seconds": np.float64, "verify_seconds": np.float64}
        arrays = {
            f.name: np.asarray(columns[f.name], dtype=kinds.get(f.name, np.int64))
            for f in dataclasses.fields(cls)
        }
        if len({len(a) for a in arrays.values()}) != 1:
            raise ValueError("StepRecords: every field must have one entry per step")
        return cls(**arrays)

    def to_dict(self) -> dict[str, list]:
        return {f.name: getattr(self, f.name).tolist() for f in dataclasses.fields(self)}

    def __len__(self) -> int:
        return len(self.context)

    def select(self, mask: np.ndarray) -> StepRecords:
        """The steps where ``mask`` is True."""
        return StepRecords(**{f.name: getattr(self, f.name)[mask] for f in dataclasses.fields(self)})


def calibration_actions(k_max: int, taus: Sequence[float] = (0.3, 0.6)) -> list[Action]:
    """One cycle of the recording's actions: every k = 0..k_max at tau 0 (so every verify size
    n = k + 1 occurs as often), and every second k once more with a tau cut cycling over
    ``taus`` (so tau-stopped drafts, a forward more than proposals, occur too; not more often,
    since most of them stop early and verify one or two tokens)."""
    actions = [Action(k, 0.0) for k in range(k_max + 1)]
    if taus:
        actions += [Action(k, taus[i % len(taus)]) for i, k in enumerate(range(2, k_max + 1, 2))]
    return actions


def _calibration_prompts(pair: ModelPair, rng: np.random.Generator, room: int) -> list[list[int]]:
    """Token ids of the pair's train prompts, domains alternating, each domain shuffled; random
    token ids (16-128 long) for a pair without prompts. Each leaves ``room`` tokens to decode."""
    longest = max(1, pair.context_length - room)
    texts = pair.prompts.get("train", {})
    if not texts:
        top = pair.vocab_size - 1 if pair.eos_token_id == pair.vocab_size - 1 else pair.vocab_size
        return [rng.integers(0, top, int(rng.integers(16, 129))).tolist()[:longest] for _ in range(64)]
    orders = {domain: rng.permutation(len(items)).tolist() for domain, items in texts.items() if items}
    prompts = []
    for i in range(max(len(order) for order in orders.values())):
        for domain, order in orders.items():
            ids = pair.encode(texts[domain][order[i % len(order)]])[-longest:]
            if ids:
                prompts.append(ids)
    return prompts


@torch.inference_mode()
def record_loop(
    pair: ModelPair,
    *,
    k_max: int = 8,
    steps: int = 3000,
    warmup_steps: int = 100,
    temperature: float = 1.0,
    max_new_tokens: int = 192,
    seed: int = 0,
    progress: bool = True,
) -> StepRecords:
    """Time ``steps`` steps of the engine's loop, greedy and sampled interleaved step by step.

    Two generations are live at a time, one greedy and one at ``temperature``, on the pair's
    train prompts; each step takes the next action of its mode's shuffled cycle of
    :func:`calibration_actions`, so every action meets the same machine noise. A finished
    generation is replaced by one on the next prompt. The first ``warmup_steps`` steps are
    run the same way and dropped.
    """
    from tqdm import tqdm

    from specrl.engine.generation import Generation  # engine -> latency is one way: import late

    if k_max < 1 or steps < 1 or warmup_steps < 0:
        raise ValueError(
            f"k_max and steps must be >= 1 and warmup_steps >= 0, got {k_max}, {steps}, {warmup_steps}"
        )
    rng = np.random.default_rng(seed)
    prompts = _calibration_prompts(pair, rng, room=max_new_tokens)
    samplings = (SamplingConfig(), SamplingConfig(temperature=temperature))
    cycle = calibration_actions(k_max)
    cycles: list[list[Action]] = [[], []]
    live: list[Generation | None] = [None, None]
    episodes = [0, 0]
    started = 0
    recorded: list[tuple[StepResult, bool, int]] = []
    bar = tqdm(
        total=warmup_steps + steps, desc=f"timing the loop of {pair.name}", unit="step", disable=not progress
    )
    done = 0
    while done < warmup_steps + steps:
        mode = done % 2  # greedy, sampled, greedy, ...
        generation = live[mode]
        if generation is None or generation.done:
            prompt = prompts[started % len(prompts)]
            generation = live[mode] = Generation(
                pair, prompt, max_new_tokens, samplings[mode], seed=seed + started, stop_at_eos=True
            )
            episodes[mode], started = started, started + 1
        if not cycles[mode]:
            cycles[mode] = [cycle[i] for i in rng.permutation(len(cycle))]
        result = generation.step(cycles[mode].pop())
        if done >= warmup_steps:
            recorded.append((result, bool(mode), episodes[mode]))
        done += 1
        bar.update(1)
    bar.close()
    return StepRecords.from_steps(recorded)


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


def _tolerant_isotonic(groups: Sequence[np.ndarray], z: float) -> np.ndarray:
    """One value per group (its mean), made non-decreasing where noise could explain a decrease.

    Pool adjacent violators, as isotonic regression does (a pooled block's value is the mean
    of all its samples), unless the later group is lower by more than ``z`` standard errors of
    the difference: such a decrease is the hardware's (CPU kernels change at vector widths),
    not noise, and pooling it would misprice both. ``z`` = inf pools every violation.
    """
    blocks: list[tuple[int, np.ndarray]] = []  # (groups pooled, their samples)
    for samples in groups:
        block = (1, samples)
        while blocks:
            count, previous = blocks[-1]
            gap = previous.mean() - block[1].mean()
            noise = np.sqrt(previous.var(ddof=1) / len(previous) + block[1].var(ddof=1) / len(block[1]))
            if gap <= 0 or gap > z * noise:
                break
            blocks.pop()
            block = (count + block[0], np.concatenate([previous, block[1]]))
        blocks.append(block)
    return np.array([samples.mean() for count, samples in blocks for _ in range(count)])


def _verify_lines(
    n: np.ndarray, context: np.ndarray, seconds: np.ndarray, n_max: int, z: float
) -> tuple[np.ndarray, np.ndarray]:
    """(intercepts (n_max,), slopes (n_max,)) of verify seconds = a_n + (b0 + b1 (n - 1)) * ctx.

    Least squares over all steps of a mode: an intercept per n, and a context slope that grows
    linearly with n (attention reads the cache once per new token), b0, b1 >= 0. The
    intercepts are then made non-decreasing in n by :func:`_tolerant_isotonic` over the
    steps' residuals; with slopes growing in n, the rows are then ordered at every context.
    """
    x = context.astype(np.float64)
    columns = [(n == m).astype(np.float64) for m in range(1, n_max + 1)] + [x, (n - 1) * x]
    coef = _nonnegative_lstsq(columns, seconds, slopes=(n_max, n_max + 1))
    slopes = coef[n_max] + coef[n_max + 1] * np.arange(n_max)
    residual = seconds - slopes[n - 1] * x  # each step's cost at context 0
    intercepts = _tolerant_isotonic([residual[n == m] for m in range(1, n_max + 1)], z)
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
    target = intercepts[:, None] + slopes[:, None] * grid[None, :]

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
    """Fit the loop model to recorded steps (the module doc says how).

    Args:
        records: steps of both modes (:func:`record_loop`).
        k_max: verifies over 1..k_max + 1 tokens are tabulated; each needs recorded steps.
        context_window: the grid ends at this context (the lines continue to it); None: the
            grid ends at the last knot and the model is clamped after it.
        knots: context knots, at quantiles of the recorded contexts (the fit is linear in the
            context, so they only say where the data were; the table shows them).
        significance: a verify over more tokens may cost less than over fewer only when the
            difference exceeds this many standard errors (math.inf: strictly monotone in n).

    Returns:
        The context grid and mode -> the three ``*_seconds`` tables of the file format.
    """
    grid = fit_grid(records.context, knots)
    if context_window is not None and context_window > grid[-1]:
        grid.append(int(context_window))
    costs = {}
    for mode in MODES:
        mine = records.select(records.sampled == (mode == "sampled"))
        if len(mine) == 0:
            raise LatencyError(f"no {mode} steps recorded: record both modes")
        tables = _fit_mode(mine, np.array(grid, dtype=np.float64), k_max + 1, significance)
        costs[mode] = dict(zip(_COST_KEYS, tables, strict=True))
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
    steps: int = 3000,
    warmup_steps: int = 100,
    knots: int = 5,
    max_new_tokens: int = 192,
    seed: int = 0,
    progress: bool = True,
    records: StepRecords | None = None,
) -> LatencyModel:
    """Record the pair's loop (:func:`record_loop`) and fit the model (:func:`fit_records`).

    The held-out error (``fit_error``) comes from a fit without every fifth episode, tested on
    those episodes; the returned model is then fitted on all steps. ``records`` skips the
    recording (e.g. steps saved before). The steps' totals go into ``measurement``.
    """
    started, recorded = time.perf_counter(), records is None
    if records is None:
        records = record_loop(
            pair,
            k_max=k_max,
            steps=steps,
            warmup_steps=warmup_steps,
            max_new_tokens=max_new_tokens,
            seed=seed,
            progress=progress,
        )
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
        "warmup_steps": warmup_steps,
        "episodes": int(len(np.unique(records.episode))),
        "contexts_recorded": [int(records.context.min()), int(records.context.max())],
        "knots": knots,
        "fit": "winsorised least squares in the piecewise-linear context basis; isotonic along n, then "
        "context; linear extension to the window",
        "included": LOOP_INCLUDED,
        **_environment(),
    }
    if recorded:  # the calibration's duration, when it recorded the steps itself
        measurement["seconds"] = round(time.perf_counter() - started, 1)
    model = _model_of_fit(
        grid,
        costs,
        pair=pair.name,
        device=device_key(pair.device),
        dtype=_dtype_name(pair.dtype),
        fit_error=fit_error,
        measurement=measurement,
    )
    if progress:
        print(_fit_error_line(model.fit_error))
    return model


def _environment() -> dict[str, Any]:
    return {
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host_cpus": os.cpu_count(),
    }


def calibrated(
    pair: ModelPair,
    *,
    k_max: int = 8,
    recalibrate: bool = False,
    progress: bool = True,
    method: str = "loop",
) -> LatencyModel:
    """The pair's latency model on its device (greedy view): the cached file
    (:func:`latency_path`), or a fresh one saved there when it is missing, covers fewer than
    k_max + 1 new tokens, is unreadable (another format version included: a warning says so),
    or ``recalibrate`` is set. ``method`` "loop" (default) learns from the loop
    (:func:`learn`), "profile" profiles forwards in isolation (:func:`profile`)."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    path = latency_path(pair, method)
    if path.is_file() and not recalibrate:
        try:
            model = LatencyModel.load(path)
        except LatencyError as error:
            warnings.warn(f"{error}; measuring again", stacklevel=2)
        else:
            if model.n_max >= k_max + 1:
                return model
    model = (
        learn(pair, k_max=k_max, progress=progress)
        if method == "loop"
        else profile(pair, k_max=k_max, progress=progress)
    )
    model.save(path)
    return model
