"""The latency model: modeled seconds of a speculative step's draft and verify, from tables.

A speculative step costs ``draft_forwards`` single-token draft forwards plus one target
forward over ``proposed + 1`` new tokens (docs/design.md section 2). :meth:`LatencyModel.step_seconds`
is the one definition of a step's modeled time; both envs, the trace simulator and the oracle
use it.

The model, per sampling mode ("greedy": temperature 0; "sampled": temperature > 0), on a grid
of context lengths::

    draft  = 0                                              if draft_forwards == 0
           = first(ctx) + (draft_forwards - 1) * next(ctx)  otherwise
    verify = target(proposed + 1, ctx)

Other drafters (:mod:`specrl.engine.drafters`) are priced relative to the draft: a step of drafter
d costs ``drafter_costs[d]`` times the draft's seconds for the same positions (measured in the loop
by :mod:`specrl.latency.drafters`; the draft's own price is 1).

The first draft forward after a verification is priced apart from the following ones: in the
loop it is measurably dearer (on the small pair on CPU, 3.05 ms against 2.53 ms for each next
one; likely because the target's forward has just evicted the draft's weights from the CPU
caches, and the draft catches up on two tokens after a full acceptance). The sampled mode has
its own tables: drawing tokens (``torch.multinomial``), the residual distribution and the
uniform draws of the acceptance test cost time that greedy steps do not spend. A model answers
for one mode at a time; :meth:`LatencyModel.for_sampling` gives the one for a scenario's
:class:`~specrl.engine.sampling.SamplingConfig` (the envs call it), and a file holds both.

Interpolation: exact in n (each n keeps its own row), piecewise linear in the context between
grid points, clamped (constant) outside the grid. Beyond the tabulated n the target cost is
extrapolated linearly from the last two rows.

Where the tables come from: :mod:`specrl.latency.fit` (learned from the loop),
:mod:`specrl.latency.profiling` (forwards in isolation) or :meth:`LatencyModel.from_cost_model`
(constant); how they are stored: :mod:`specrl.latency.fileformat`.
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
                COST_KEYS,
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
        device: the device key (:func:`~specrl.latency.store.device_key`) it was measured on,
            or "any".
        dtype: the models' dtype ("float32", ...), or "any".
        batch_size: rows per forward; 1 (the only one measured so far).
        kind: "loop" (:func:`~specrl.latency.fit.learn`), "profiled"
            (:func:`~specrl.latency.profiling.profile`) or "constant" (:meth:`from_cost_model`).
        mode: the sampling mode this view prices, "greedy" or "sampled".
        contexts: the grid of context lengths, strictly increasing.
        costs: mode -> :class:`ForwardCosts` on that grid.
        fit_error: held-out fit error (:func:`~specrl.latency.fit.heldout_error`, or the
            profile's), or None.
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
        drafter_costs: Mapping[str, float] | None = None,
    ) -> None:
        """Build from the greedy tables (``target_table`` (n_max, C), ``draft_table`` the first
        draft forward (C,), ``draft_next_table`` the following ones, default equal to the first)
        and ``sampled``, a mapping with the three ``*_seconds`` keys of the file format (default:
        the greedy tables). ``drafter_costs``: drafter -> its price relative to the draft."""
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
            missing = [key for key in COST_KEYS if key not in sampled]
            if missing:
                raise LatencyError(f"sampled: missing key(s) {missing}")
            costs = {
                "greedy": greedy,
                "sampled": ForwardCosts.build(*(sampled[k] for k in COST_KEYS), len(contexts)),
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
        self.drafter_costs = check_drafter_costs(drafter_costs or {})
        self._grid = np.array(contexts, dtype=np.float64)
        self._views = {"greedy": self}  # mode -> view; shared by all views of these tables
        self._reset_caches()

    def _reset_caches(self) -> None:
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

    def step_seconds(
        self, context_length: int, draft_forwards: int, proposed: int, drafter: str = DEFAULT_DRAFTER
    ) -> tuple[float, float]:
        """(draft seconds, verify seconds) of one speculative step. The one definition.

        draft = draft_seconds(context_length, ``draft_forwards``) (one forward per drafted
        position, the tau-stopped one included: :attr:`StepResult.draft_forwards`; the first
        priced apart from the following ones) times :meth:`drafter_cost` of ``drafter``;
        verify = target_seconds(``proposed`` + 1, context_length); both in this view's sampling mode.
        """
        if draft_forwards < 0 or proposed < 0:
            raise ValueError(f"draft_forwards and proposed must be >= 0, got {draft_forwards}, {proposed}")
        # Simulators call this tens of thousands of times a second: the values at a context
        # length are computed once (by the same interpolation as the other methods) and kept.
        row = self._rows.get(context_length)
        if row is None:
            self._check_context(context_length)
            n = np.arange(self.n_max + 1)
            targets = self._target(n, np.array([context_length]))[:, 0].tolist()
            first, following = (float(v[0]) for v in self._draft(np.array([context_length])))
            row = self._rows[context_length] = (first, following, targets)
        first, following, targets = row
        draft = first + (draft_forwards - 1) * following if draft_forwards else 0.0
        if drafter != DEFAULT_DRAFTER:
            draft *= self.drafter_cost(drafter)
        verify = (
            targets[proposed + 1]
            if proposed < self.n_max
            else self.target_seconds(proposed + 1, context_length)
        )
        return draft, verify

    def seconds(self, result: StepResult) -> tuple[float, float]:
        """(draft seconds, verify seconds) of an engine step: :meth:`step_seconds` of its counts."""
        return self.step_seconds(
            result.context_length, result.draft_forwards, result.proposed, result.drafter
        )

    @property
    def plain_tokens_per_s(self) -> float:
        """Plain decoding throughput: 1 / target_seconds(1, 256), at context 256
        (``PLAIN_REFERENCE_CONTEXT``: a ~100-token prompt plus a 128-token episode)."""
        return 1.0 / self.target_seconds(1, PLAIN_REFERENCE_CONTEXT)

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
            "batch_size": self.batch_size,
            "contexts": list(self.contexts),
            "new_tokens": list(range(1, self.n_max + 1)),
            **{mode: self.costs[mode].to_dict() for mode in MODES},
            "fit_error": self.fit_error,
            "measurement": self.measurement,
            "drafter_costs": dict(self.drafter_costs),
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> LatencyModel:
        """Validate and build (the greedy view); any problem raises :class:`LatencyError` naming
        ``source``."""
        fileformat.check(data, source)
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
                batch_size=data["batch_size"],
                kind=data["kind"],
                fit_error=data.get("fit_error"),
                measurement=data.get("measurement"),
                drafter_costs=data.get("drafter_costs"),
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
        """Per mode: target ms by n x context, draft ms (first, next) by context; the fit error."""
        align = ["right"] * (len(self.contexts) + 1)

        def table(corner: str, rows: list[tuple[object, np.ndarray]]) -> str:
            cells = [[label, *(f"{1e3 * s:.3f}" for s in row)] for label, row in rows]
            return markdown_table([corner, *self.contexts], cells, align)

        lines = [
            f"Latency model: pair `{self.pair}`, device `{self.device}`, dtype {self.dtype}, "
            f"batch {self.batch_size} ({self.kind}). Milliseconds.",
        ]
        for mode in MODES:
            costs = self.costs[mode]
            lines += ["", f"**{mode}**: verify (target forward over n new tokens, and what follows it):", ""]
            lines.append(table("n \\ context", list(enumerate(costs.target, start=1))))
            lines += ["", f"**{mode}**: draft forwards of a step:", ""]
            lines.append(table("draft", [("first", costs.draft_first), ("each next", costs.draft_next)]))
            plain = 1.0 / self.for_sampling(
                SamplingConfig(temperature=float(mode == "sampled"))
            ).target_seconds(1, PLAIN_REFERENCE_CONTEXT)
            lines += [
                "",
                f"Plain decoding ({mode}) at context {PLAIN_REFERENCE_CONTEXT}: {plain:.1f} tokens/s.",
            ]
        lines += ["", fit_error_line(self.fit_error)]
        return "\n".join(lines) + "\n"


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
    """One sentence on a model's held-out fit error (loop or profiled), for tables and logs."""
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
