"""The latency model: modeled seconds of a speculative step's draft and verify, from tables.

Per sampling mode ("greedy": temperature 0; "sampled"), on a grid of batch sizes B and contexts::

    draft  = (first(B, ctx) + (draft_forwards - 1) * next(B, ctx)) * draft_scale(B), 0 if no forward
    verify = target(B, proposed + 1, ctx) * verify_scale(B, proposed + 1)
    prefill(m prompts joining B rows) = c0 + c1 m p + c2 m p^2 + c3 (B + m) max(ctx - 1, p)

:meth:`LatencyModel.step_seconds` is the one definition of a step's modeled time (envs, trace
simulators, oracle). A single sequence is the batch of one; a batch's context is its cache grid's
width plus one, and its rows are priced at :func:`step_shape`; a :attr:`~LatencyModel.packed`
engine's (kind "serving", vLLM: :mod:`specrl.latency.serving`) at the tokens they verify in total
and their mean context instead. Another drafter d costs
``drafter_costs[d]`` times the draft's seconds. The first draft forward after a verification is
priced apart: in the loop it is dearer (the target's forward has evicted the draft's weights from
the CPU caches). Interpolation: linear in B and in the context between grid points, clamped
outside; exact in n, extrapolated linearly beyond the last row.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import DEFAULT_DRAFTER, StepResult
from specrl.features import PriceLine
from specrl.latency import fileformat
from specrl.latency.cost_model import CONSTANT_DRAFTER_COSTS, CostModel
from specrl.latency.fileformat import (
    COST_KEYS,
    KINDS,
    LATENCY_FORMAT,
    LATENCY_FORMAT_VERSION,
    MODES,
    LatencyError,
)
from specrl.tables import markdown_table

# plain_tokens_per_s is read at this context: a prompt of ~100 tokens plus a 128-token episode.
PLAIN_REFERENCE_CONTEXT = 256
PRICE_LINE_CACHE = 1 << 16  # (rows, context) price lines a model keeps


def sampling_mode(sampling: SamplingConfig | None) -> str:
    """ "greedy" for temperature 0 (or None), "sampled" otherwise: the model's two modes."""
    return "greedy" if sampling is None or sampling.greedy else "sampled"


@dataclasses.dataclass(frozen=True)
class ForwardCosts:
    """Seconds of one sampling mode's forwards on a model's grid of batch sizes and contexts
    (read-only arrays).

    Attributes:
        target: (B, n_max, C) a verify (target forward) over n = 1..n_max new tokens a row.
        draft_first: (B, C) the first draft forward of a step.
        draft_next: (B, C) each further draft forward of the same step.
    """

    target: np.ndarray
    draft_first: np.ndarray
    draft_next: np.ndarray

    @classmethod
    def build(
        cls, target: Any, draft_first: Any, draft_next: Any | None, columns: int, sizes: int = 1
    ) -> ForwardCosts:
        """Validate shapes and values; ``draft_next`` None means every draft forward costs the
        first's. With one batch size the tables may come without their batch axis ((n_max, C) and
        (C,), a single sequence's)."""
        target = np.array(target, dtype=np.float64)  # copies: the model owns its tables
        first = np.array(draft_first, dtype=np.float64)
        following = first.copy() if draft_next is None else np.array(draft_next, dtype=np.float64)
        if sizes == 1:
            target = target[None] if target.ndim == 2 else target
            first = first[None] if first.ndim == 1 else first
            following = following[None] if following.ndim == 1 else following
        if target.ndim != 3 or target.shape[0] != sizes or target.shape[1] < 2 or target.shape[2] != columns:
            raise LatencyError(
                f"target_seconds must have, per batch size ({sizes}), one row per n = 1..n_max "
                f"(n_max >= 2) and one column per context ({columns}), got shape {target.shape}"
            )
        for name, row in (("draft_first_seconds", first), ("draft_next_seconds", following)):
            if row.shape != (sizes, columns):
                raise LatencyError(
                    f"{name} must have one value per context ({columns}) per batch size ({sizes}), "
                    f"got shape {row.shape}"
                )
            if not (np.isfinite(row).all() and (row >= 0).all()):
                raise LatencyError(f"{name} must be finite and >= 0")
        if not (np.isfinite(target).all() and (target > 0).all()):
            raise LatencyError("target_seconds must be finite and > 0: a target forward cannot be free")
        for array in (target, first, following):
            array.setflags(write=False)
        return cls(target, first, following)

    def to_dict(self) -> dict[str, Any]:
        tables = (self.target, self.draft_first, self.draft_next)
        return {key: table.tolist() for key, table in zip(COST_KEYS, tables, strict=True)}


def bracket(grid: Sequence[float], x: float) -> tuple[int, int, float]:
    """The grid points around ``x`` and its weight on the upper one (x clamped to the grid)."""
    if len(grid) == 1 or x <= grid[0]:
        return 0, 0, 0.0
    if x >= grid[-1]:
        return len(grid) - 1, len(grid) - 1, 0.0
    upper = next(i for i, g in enumerate(grid) if g > x)
    return upper - 1, upper, (x - grid[upper - 1]) / (grid[upper] - grid[upper - 1])


def step_shape(rows: Sequence[Any]) -> tuple[int, int]:
    """A step's (draft forwards, proposals a row is priced at) from its rows' results (anything
    with ``proposed`` and one ``confidences`` entry per draft forward): the rows are padded to the
    longest feed, and drafting runs until the last row stops."""
    if len(rows) == 1:  # a single sequence's step is its own shape (the simulators' hot path)
        return len(rows[0].confidences), rows[0].proposed
    return max(len(row.confidences) for row in rows), max(row.proposed for row in rows)


class LatencyModel:
    """Modeled seconds of a step's draft and verify, for one sampling mode (see the module doc).

    Contexts follow :attr:`StepResult.context_length` (the tokens before the step). A model holds
    the tables of both modes and answers for :attr:`mode` ("greedy" when built or loaded);
    :meth:`for_sampling` gives the view of another mode, sharing the tables.

    Attributes:
        pair, device, dtype: what it was measured for ("any" for a constant or synthetic model).
        batch_sizes, contexts: the grid, each strictly increasing; (1,) for one sequence.
        kind: one of :data:`~specrl.latency.fileformat.KINDS` (how the tables were made).
        costs: mode -> :class:`ForwardCosts`.
        draft_scale, verify_scale, prefill: the batch model's calibration (module doc).
        fit_error: the held-out fit error, or None; measurement: how it was made.
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
        batch_sizes: Sequence[int] = (1,),
        kind: str = "profiled",
        fit_error: dict[str, Any] | None = None,
        measurement: dict[str, Any] | None = None,
        drafter_costs: Mapping[str, float] | None = None,
        draft_scale: Any | None = None,
        verify_scale: Any | None = None,
        prefill: Sequence[float] = (0.0, 0.0, 0.0, 0.0),
    ) -> None:
        """Build from the greedy tables (``target_table`` (B, n_max, C), ``draft_table`` the first
        draft forward (B, C), ``draft_next_table`` the following ones, default the first's; no
        batch axis needed for one size) and ``sampled`` (the file's three ``*_seconds`` keys;
        default the greedy tables)."""
        contexts = [int(c) for c in contexts]
        batch_sizes = [int(b) for b in batch_sizes]
        for name, grid, least in (("contexts", contexts, 0), ("batch_sizes", batch_sizes, 1)):
            increasing = all(a < b for a, b in zip(grid, grid[1:], strict=False))
            if not grid or grid[0] < least or not increasing:
                raise LatencyError(
                    f"{name} must be a non-empty, strictly increasing list of values >= {least}, got {grid}"
                )
        if kind not in KINDS:
            raise LatencyError(f"kind must be one of {KINDS}, got {kind!r}")
        sizes = len(batch_sizes)
        greedy = ForwardCosts.build(target_table, draft_table, draft_next_table, len(contexts), sizes)
        costs = {"greedy": greedy, "sampled": greedy}
        if sampled is not None:  # a file's keys are checked by fileformat.check
            costs["sampled"] = ForwardCosts.build(*(sampled[k] for k in COST_KEYS), len(contexts), sizes)
        if costs["sampled"].target.shape != greedy.target.shape:
            raise LatencyError(
                f"the sampled target_seconds must have the greedy one's shape {greedy.target.shape}, "
                f"got {costs['sampled'].target.shape}"
            )
        n_max = greedy.target.shape[1]
        self.draft_scale = _scale("draft_scale", draft_scale, (sizes,))
        self.verify_scale = _scale("verify_scale", verify_scale, (sizes, n_max))
        prefill = tuple(float(c) for c in prefill)
        if len(prefill) != 4 or not all(np.isfinite(c) and c >= 0 for c in prefill):
            raise LatencyError(f"prefill must be 4 finite coefficients >= 0, got {list(prefill)}")
        self.pair, self.device, self.dtype = str(pair), str(device), str(dtype)
        self.kind = str(kind)
        self.contexts, self.batch_sizes = tuple(contexts), tuple(batch_sizes)
        self.costs = costs
        self.prefill = prefill
        self.mode = "greedy"
        self.fit_error = fit_error
        self.measurement = dict(measurement or {})
        self.drafter_costs = check_drafter_costs(drafter_costs or {})
        self._grid = np.array(contexts, dtype=np.float64)
        self._views = {"greedy": self}  # mode -> view; shared by all views of these tables
        self._reset_caches()

    def _reset_caches(self) -> None:
        # rows -> this mode's tables at that batch size (target (n_max, C), first (C,), next (C,))
        self._slices: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        # context (one row) or (rows, context) -> (first draft, next draft, target by n): step_seconds
        self._rows: dict[Any, tuple[float, float, list[float]]] = {}
        # (rows, context) -> price_line: the features ask it on every step of every served request
        self._price_lines: dict[tuple[int, int], PriceLine] = {}

    def for_sampling(self, sampling: SamplingConfig | None) -> LatencyModel:
        """The view that prices steps decoded with ``sampling`` (None: greedy). Views share the
        tables and are cached: the same call returns the same object."""
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
            f"batch_sizes={list(self.batch_sizes)}, contexts={list(self.contexts)})"
        )

    @property
    def n_max(self) -> int:
        """The largest tabulated number of new tokens per target forward (k_max + 1)."""
        return self.costs["greedy"].target.shape[1]

    @property
    def target_table(self) -> np.ndarray:
        """(n_max, C) seconds of a verify over n = 1..n_max tokens of one row, in this view's mode."""
        return self._slice(1)[0]

    @property
    def draft_table(self) -> np.ndarray:
        """(C,) seconds of the first draft forward of a step of one row, in this view's mode."""
        return self._slice(1)[1]

    @property
    def draft_next_table(self) -> np.ndarray:
        """(C,) seconds of each further draft forward of a step of one row, in this view's mode."""
        return self._slice(1)[2]

    # ---- the model: the one vectorised path every method goes through -------------------

    def _slice(self, rows: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """This mode's tables at ``rows`` rows, scales applied: linear in the batch size between
        grid sizes, the nearest size outside. A one-size model without scales is its tables."""
        tables = self._slices.get(rows)
        if tables is None:
            if rows < 1:
                raise ValueError(f"rows must be >= 1, got {rows}")
            costs = self.costs[self.mode]
            b0, b1, t = bracket(self.batch_sizes, rows)
            tables = tuple(
                table[b0] if t == 0 else (1 - t) * table[b0] + t * table[b1]
                for table in (costs.target, costs.draft_first, costs.draft_next)
            )
            if self.verify_scale is not None:
                scale = (1 - t) * self.verify_scale[b0] + t * self.verify_scale[b1]
                tables = (tables[0] * scale[:, None], *tables[1:])
            if self.draft_scale is not None:
                scale = (1 - t) * self.draft_scale[b0] + t * self.draft_scale[b1]
                tables = (tables[0], tables[1] * scale, tables[2] * scale)
            self._slices[rows] = tables
        return tables

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

    def _target(self, new_tokens: np.ndarray, context_lengths: np.ndarray, rows: int = 1) -> np.ndarray:
        """(N, L) seconds of target forwards of ``rows`` rows over ``new_tokens`` (N,) a row at
        ``context_lengths`` (L,)."""
        table = self._slice(rows)[0]
        n_max = table.shape[0]
        at = self._interpolate(table, context_lengths)  # (n_max, L)
        out = np.zeros((len(new_tokens), len(context_lengths)))
        for i, n in enumerate(new_tokens.tolist()):
            if n < 0:
                raise ValueError(f"new_tokens must be >= 0, got {n}")
            if 1 <= n <= n_max:
                out[i] = at[n - 1]
            elif n > n_max:  # beyond the table: linear in n from the last two rows
                out[i] = at[-1] + (n - n_max) * (at[-1] - at[-2])
        return out

    def _draft(self, context_lengths: np.ndarray, rows: int = 1) -> tuple[np.ndarray, np.ndarray]:
        """(first, next) draft-forward seconds of ``rows`` rows at ``context_lengths`` (L,), each (L,)."""
        _, first, following = self._slice(rows)
        return self._interpolate(first, context_lengths), self._interpolate(following, context_lengths)

    @staticmethod
    def _check_context(context_length: int) -> None:
        if context_length < 0:
            raise ValueError(f"context_length must be >= 0, got {context_length}")

    # ---- the public interface ---------------------------------------------------------------

    def target_seconds(self, new_tokens: int, context_length: int, rows: int = 1) -> float:
        """One target forward over ``new_tokens`` tokens a row after ``context_length`` tokens,
        for ``rows`` rows. 0 new tokens cost 0 (no forward)."""
        self._check_context(context_length)
        return float(self._target(np.array([new_tokens]), np.array([context_length]), rows)[0, 0])

    def draft_seconds(self, context_length: int, forwards: int = 1, rows: int = 1) -> float:
        """``forwards`` consecutive one-token draft forwards of a step of ``rows`` rows after
        ``context_length`` tokens: first + (forwards - 1) * next (0 for none)."""
        self._check_context(context_length)
        if forwards < 0:
            raise ValueError(f"forwards must be >= 0, got {forwards}")
        first, following = (float(v[0]) for v in self._draft(np.array([context_length]), rows))
        return first + (forwards - 1) * following if forwards else 0.0

    def drafter_cost(self, drafter: str) -> float:
        """The price of ``drafter``'s drafting relative to the draft's (1 for the draft)."""
        if drafter == DEFAULT_DRAFTER:
            return 1.0
        cost = self.drafter_costs.get(drafter)
        if cost is None:
            raise LatencyError(
                f"this latency model ({self.kind}, pair {self.pair}) has no price for the drafter "
                f"{drafter!r} (it prices {[DEFAULT_DRAFTER, *self.drafter_costs]}); a scenario with "
                "`drafters:` and `latency: calibrated` measures it on first use "
                "(specrl.latency.drafters.measure_drafter_costs)"
            )
        return cost

    def unpriced(self, drafters: Sequence[str]) -> list[str]:
        """The drafters of ``drafters`` this model has no price for (the draft is always priced)."""
        return [d for d in drafters if d != DEFAULT_DRAFTER and d not in self.drafter_costs]

    @property
    def packed(self) -> bool:
        """Whether this machine's engine packs the rows' tokens without padding (vLLM, kind
        "serving"): a batched step is priced at the tokens its rows verify in total and at their
        mean context (:meth:`step_seconds` ``verified``), not at the longest feed and the grid."""
        return self.kind == "serving"

    def step_seconds(
        self,
        context_length: int,
        draft_forwards: int,
        proposed: int,
        drafter: str = DEFAULT_DRAFTER,
        rows: int = 1,
        verified: int | None = None,
    ) -> tuple[float, float]:
        """(draft seconds, verify seconds) of one speculative step of ``rows`` rows: the one
        definition (module doc). ``draft_forwards`` counts the tau-stopped forward too
        (:attr:`StepResult.draft_forwards`). ``verified``, the tokens the rows feed in total,
        prices the verify at their mean a row (linear between whole counts) instead of every row
        at ``proposed + 1``: for a :attr:`packed` engine."""
        if draft_forwards < 0 or proposed < 0:
            raise ValueError(f"draft_forwards and proposed must be >= 0, got {draft_forwards}, {proposed}")
        if verified is not None and verified < rows:
            raise ValueError(f"verified must be >= rows ({rows}): each row verifies a token; got {verified}")
        # The simulators' hot path: the values at a context are interpolated once and kept.
        key = context_length if rows == 1 else (rows, context_length)
        row = self._rows.get(key)
        if row is None:
            self._check_context(context_length)
            n = np.arange(self.n_max + 1)
            targets = self._target(n, np.array([context_length]), rows)[:, 0].tolist()
            first, following = (float(v[0]) for v in self._draft(np.array([context_length]), rows))
            row = self._rows[key] = (first, following, targets)
        first, following, targets = row
        draft = first + (draft_forwards - 1) * following if draft_forwards else 0.0
        if drafter != DEFAULT_DRAFTER:
            draft *= self.drafter_cost(drafter)
        if verified is None:
            verify = (
                targets[proposed + 1]
                if proposed < self.n_max
                else self.target_seconds(proposed + 1, context_length, rows)
            )
        else:  # the mean feed, linear between the tabulated ones and beyond the last two
            feed = verified / rows
            low = min(int(feed), self.n_max - 1)
            verify = targets[low] + (feed - low) * (targets[low + 1] - targets[low])
        return draft, verify

    def seconds(self, result: StepResult) -> tuple[float, float]:
        """(draft seconds, verify seconds) of an engine step: :meth:`step_seconds` of its counts."""
        return self.step_seconds(
            result.context_length, result.draft_forwards, result.proposed, result.drafter
        )

    def prefill_seconds(self, prompt_lengths: Sequence[int], rows: int = 0, context_length: int = 0) -> float:
        """Admitting prompts of ``prompt_lengths`` tokens (their caches hold all but the last)
        into a batch of ``rows`` rows at ``context_length`` (its grid's width plus one; 0 for an
        empty batch): the prefill term of the module doc."""
        if not prompt_lengths:
            return 0.0
        return float(np.dot(self.prefill, prefill_terms(prompt_lengths, rows, context_length)))

    def price_line(self, rows: int = 1, context_length: float = PLAIN_REFERENCE_CONTEXT) -> PriceLine:
        """The prices of a step of ``rows`` rows after ``context_length`` tokens as the features
        read them (:class:`specrl.features.PriceLine`): the verification's line through one and
        ``n_max`` tokens a row, its curve over 1..``n_max``, and the mean draft forward."""
        context = max(0, round(context_length))
        line = self._price_lines.get((rows, context))
        if line is None:
            self._check_context(context)
            curve = self._target(np.arange(1, self.n_max + 1), np.array([context]), rows)[:, 0].tolist()
            one = curve[0]
            per_token = max(0.0, (curve[-1] - one) / ((self.n_max - 1) * rows))
            draft = self.draft_seconds(context, 2, rows) / 2
            line = PriceLine(draft, one - per_token * rows, per_token, tuple(curve))
            if len(self._price_lines) >= PRICE_LINE_CACHE:  # a long-serving process: start over
                self._price_lines.clear()
            self._price_lines[rows, context] = line
        return line

    def plain_throughput(self, rows: int = 1, context_length: int = PLAIN_REFERENCE_CONTEXT) -> float:
        """Plain decoding's tokens per second: ``rows`` tokens per target forward of one token a
        row after ``context_length`` tokens."""
        return rows / self.target_seconds(1, context_length, rows)

    @property
    def plain_tokens_per_s(self) -> float:
        """:meth:`plain_throughput` of one row at ``PLAIN_REFERENCE_CONTEXT``."""
        return self.plain_throughput()

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
        forward draft_forward_s; the other drafters at ``CONSTANT_DRAFTER_COSTS``."""
        if cost_model is None:
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
            drafter_costs=CONSTANT_DRAFTER_COSTS,
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": LATENCY_FORMAT,
            "version": LATENCY_FORMAT_VERSION,
            "kind": self.kind,
            "pair": self.pair,
            "device": self.device,
            "dtype": self.dtype,
            "batch_sizes": list(self.batch_sizes),
            "contexts": list(self.contexts),
            "new_tokens": list(range(1, self.n_max + 1)),
            **{mode: self.costs[mode].to_dict() for mode in MODES},
            "draft_scale": None if self.draft_scale is None else self.draft_scale.tolist(),
            "verify_scale": None if self.verify_scale is None else self.verify_scale.tolist(),
            "prefill": list(self.prefill),
            "fit_error": self.fit_error,
            "measurement": self.measurement,
            "drafter_costs": dict(self.drafter_costs),
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> LatencyModel:
        """Validate and build (the greedy view); any problem raises :class:`LatencyError` naming
        ``source``."""
        data = fileformat.check(data, source)
        greedy = data["greedy"]
        try:
            return cls(
                data["pair"],
                data["device"],
                data["contexts"],
                greedy["target_seconds"],
                greedy["draft_first_seconds"],
                draft_next_table=greedy["draft_next_seconds"],
                sampled=data["sampled"],
                dtype=data["dtype"],
                batch_sizes=data["batch_sizes"],
                kind=data["kind"],
                fit_error=data.get("fit_error"),
                measurement=data.get("measurement"),
                drafter_costs=data.get("drafter_costs"),
                draft_scale=data["draft_scale"],
                verify_scale=data["verify_scale"],
                prefill=data["prefill"],
            )
        except (TypeError, ValueError) as error:  # LatencyError included
            raise fileformat.invalid(source, error) from None

    def save(self, path: str | Path) -> None:
        """Write the JSON file atomically (both modes, whichever view saves it)."""
        fileformat.write(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> LatencyModel:
        """Read a latency JSON file; :class:`LatencyError` if missing, corrupt or of another version."""
        return cls.from_dict(fileformat.read(path), source=str(path))

    def to_markdown(self) -> str:
        """Per mode and batch size: target ms by n x context, draft ms (first, next) by context
        (scales applied); the fit error."""
        align = ["right"] * (len(self.contexts) + 1)

        def table(corner: str, rows: list[tuple[object, np.ndarray]]) -> str:
            cells = [[label, *(f"{1e3 * s:.3f}" for s in row)] for label, row in rows]
            return markdown_table([corner, *self.contexts], cells, align)

        sizes = ", ".join(str(b) for b in self.batch_sizes)
        lines = [
            f"Latency model: pair `{self.pair}`, device `{self.device}`, dtype {self.dtype}, "
            f"batch {sizes} ({self.kind}). Milliseconds.",
        ]
        for mode in MODES:
            view = self.for_sampling(SamplingConfig(temperature=float(mode == "sampled")))
            for rows in self.batch_sizes:
                target, first, following = view._slice(rows)
                at = f" at {rows} rows" if len(self.batch_sizes) > 1 else ""
                lines += [
                    "",
                    f"**{mode}**{at}: verify (target forward over n new tokens, and what follows it):",
                    "",
                ]
                lines.append(table("n \\ context", list(enumerate(target, start=1))))
                lines += ["", f"**{mode}**{at}: draft forwards of a step:", ""]
                lines.append(table("draft", [("first", first), ("each next", following)]))
            lines += [
                "",
                f"Plain decoding ({mode}) at context {PLAIN_REFERENCE_CONTEXT}: "
                f"{view.plain_tokens_per_s:.1f} tokens/s.",
            ]
        lines += ["", fit_error_line(self.fit_error)]
        return "\n".join(lines) + "\n"


def prefill_terms(prompt_lengths: Sequence[int], rows: int, context_length: int) -> list[float]:
    """The prefill model's terms (the module doc): 1, m p, m p^2, and the slots a join copies."""
    m, p = len(prompt_lengths), max(prompt_lengths) - 1
    return [1.0, m * p, m * p * p, (rows + m) * max(context_length - 1, p) if rows else 0.0]


def _scale(name: str, values: Any | None, shape: tuple[int, ...]) -> np.ndarray | None:
    """A read-only scale table of ``shape``, finite and > 0, or None (no scale)."""
    if values is None:
        return None
    scale = np.array(values, dtype=np.float64)
    if scale.shape != shape:
        raise LatencyError(f"{name} has shape {scale.shape}, expected {shape}")
    if not (np.isfinite(scale).all() and (scale > 0).all()):
        raise LatencyError(f"{name} must be finite and > 0")
    scale.setflags(write=False)
    return scale


def check_drafter_costs(costs: Mapping[str, float]) -> dict[str, float]:
    """drafter -> price relative to the draft, each finite and >= 0 (a lookup is nearly free)."""
    if not isinstance(costs, Mapping):
        raise LatencyError(f"drafter_costs must map drafter names to prices, got {costs!r}")
    out = {}
    for name, cost in costs.items():
        if not isinstance(cost, int | float) or not np.isfinite(cost) or cost < 0:
            raise LatencyError(f"drafter_costs[{name!r}] must be a finite number >= 0, got {cost!r}")
        out[str(name)] = float(cost)
    return out


def fit_error_line(fit_error: dict[str, Any] | None) -> str:
    """One sentence on a model's held-out fit error (loop, serving or profiled), for tables and logs."""
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
    if fit_error.get("method") == "serving":
        parts = []
        for key, name in (("step", "step time"), ("verify", "vLLM's part"), ("draft", "draft"),
                          ("prefill_step", "steps with prefill")):  # fmt: skip
            entry = fit_error.get(key)
            if entry:
                parts.append(
                    f"{name} median {100 * entry['median']:.1f}%, p90 {100 * entry['p90']:.1f}%, "
                    f"total {100 * entry['total']:+.1f}% ({entry['steps']} steps)"
                )
        where = f"{fit_error['heldout']} of {fit_error['steps']}"
        errors = "; ".join(parts) or "none held out"
        return f"Held-out fit error (|modeled / measured - 1|, {where}): {errors}."
    target, draft = fit_error["target"], fit_error["draft"]
    return (
        f"Held-out fit error (relative, at contexts {fit_error['contexts']}): target median "
        f"{100 * target['median']:.1f}%, max {100 * target['max']:.1f}%; draft median "
        f"{100 * draft['median']:.1f}%, max {100 * draft['max']:.1f}%."
    )
