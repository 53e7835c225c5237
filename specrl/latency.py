"""The latency model: seconds of a draft forward and of a target verify, profiled per device.

A speculative step costs ``draft_forwards`` single-token draft forwards plus one target
forward over ``proposed + 1`` new tokens (DESIGN.md section 2). :meth:`LatencyModel.step_seconds`
is the one definition of a step's modeled time; both envs, the trace simulator and the oracle
use it (or the dense :meth:`LatencyModel.tables` built from it).

Profiling (:func:`profile`) runs the engine's own pieces: :class:`~specrl.engine.cache.CachedModel`
(real KV cache, fed and rolled back) and :class:`~specrl.engine.timing.DeviceClock`
(CUDA-synchronised), with the pair's weights and dtype as loaded, at batch 1. For each context
length of a grid it prefills random token ids, then times target forwards over n = 1..k_max + 1
new tokens and single-token draft forwards, rolling the caches back after each. One untimed
warm-up pass comes first; then every repeat visits every (context, n) in a rotated order, so
machine noise spreads over all cells alike; a cell's value is the median over repeats.

What a timed forward includes: the model forward (last n logits kept), the engine's
``SamplingConfig.probs`` on those logits (softmax in float32; greedy settings), and reading
one value back to the host (the target's argmax, the draft's confidence ``max q``), as the
engine does. Not included: cache rollback and the engine's bookkeeping between forwards
(acceptance test, appending tokens), which are small and do not depend on (k, tau) much.

The fit: an interpolated table, exact in n (each measured n keeps its own row) and piecewise
linear in the context length between grid points, clamped (constant) outside the grid. Why:
at small batch the cost is dominated by per-call overhead and weight reads, with no simple
parametric form in n (CPU kernels jump at vector-width boundaries; GPU ones at tile sizes),
while in the context length it grows smoothly (attention over the cache is linear in it), so
linear interpolation between points that double is accurate, and the held-out error says how
accurate. Beyond the measured n the cost is extrapolated linearly from the last two rows.
Before fitting, the measured table is made monotone by isotonic regression (the least-squares
non-decreasing fit, pool-adjacent-violators) along n, then along the context: measurement
noise must not make verifying more tokens, or a longer context, look cheaper, or a learned
policy would exploit the noise. (A running maximum would carry one noisy spike to every
larger cell; the isotonic fit averages it with its neighbours.)

Held-out error: the midpoints between consecutive grid contexts are measured the same way (in
the same interleaved passes) but not used by the fit; ``fit_error`` holds the median and max
relative error of the fit there, for the target (all n) and the draft.

File format (JSON, ``LATENCY_FORMAT_VERSION``)::

    {"format": "specrl-latency", "version": 1, "kind": "measured" | "constant",
     "pair": ..., "device": ..., "dtype": ..., "batch_size": 1,
     "contexts": [c_1 < ... < c_C], "new_tokens": [1, ..., n_max],
     "target_seconds": [[n = 1 at each context], ..., [n = n_max ...]],   # (n_max, C)
     "draft_seconds": [at each context],                                  # (C,)
     "fit_error": null | {"contexts": [...], "target_seconds": [[...]], "draft_seconds": [...],
                          "target": {"median": r, "max": r}, "draft": {"median": r, "max": r}},
     "measurement": {...}}                                                # how it was made

``batch_size`` is 1: only batch 1 is measured for now; the key is there so that a later
version can add a batch dimension without breaking the format.
"""

from __future__ import annotations

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
from specrl.engine.types import StepResult
from specrl.io import write_text_atomic
from specrl.models import ModelPair

if TYPE_CHECKING:  # specrl.envs imports this module: no runtime import back
    from specrl.envs.cost_model import CostModel

LATENCY_FORMAT = "specrl-latency"
LATENCY_FORMAT_VERSION = 1
# plain_tokens_per_s is read at this context: a prompt of ~100 tokens plus a 128-token episode.
PLAIN_REFERENCE_CONTEXT = 256
# The default profiling grid starts here, doubles, and stops at this cap (clamped beyond).
SMALLEST_GRID_CONTEXT = 16
LARGEST_DEFAULT_CONTEXT = 4096
INCLUDED = (
    "model forward (last n logits), SamplingConfig.probs (greedy), one value read back to the host; "
    "not cache rollback or the engine's bookkeeping"
)
_RECALIBRATE = (
    "re-run `python experiments/calibrate.py` (or delete the file: it is profiled again on next use)"
)


class LatencyError(ValueError):
    """A latency file or table is invalid, corrupt or from another version; says which and the fix."""


class LatencyModel:
    """Modeled seconds of draft and target forwards, from a profiled (or constant) table.

    Context lengths follow :attr:`StepResult.context_length`: the tokens in the sequence
    before the step. The target's cache then holds all of them but the last, and a verify
    runs one forward over the last emitted token plus the proposals.

    Attributes:
        pair: the pair it was measured for (``ModelPair.name``), or "any" for a constant model.
        device: the device key (:func:`device_key`) it was measured on, or "any".
        dtype: the models' dtype ("float32", ...), or "any".
        batch_size: rows per forward; 1 (the only one measured so far).
        kind: "measured" (by :func:`profile`) or "constant" (:meth:`from_cost_model`).
        contexts: the grid of context lengths, strictly increasing.
        target_table: (n_max, len(contexts)) seconds of a target forward over n = 1..n_max.
        draft_table: (len(contexts),) seconds of a one-token draft forward.
        fit_error: held-out fit error (see the module doc), or None.
        measurement: how the table was made (repeats, what a forward includes, versions, ...).
    """

    def __init__(
        self,
        pair: str,
        device: str,
        contexts: Sequence[int],
        target_table: Any,
        draft_table: Any,
        *,
        dtype: str = "any",
        batch_size: int = 1,
        kind: str = "measured",
        fit_error: dict[str, Any] | None = None,
        measurement: dict[str, Any] | None = None,
    ) -> None:
        contexts = [int(c) for c in contexts]
        target = np.array(target_table, dtype=np.float64)  # a copy: the model owns its table
        draft = np.array(draft_table, dtype=np.float64)
        increasing = all(a < b for a, b in zip(contexts, contexts[1:], strict=False))
        if not contexts or contexts[0] < 0 or not increasing:
            raise LatencyError(
                f"contexts must be a non-empty, strictly increasing list of lengths >= 0, got {contexts}"
            )
        if target.ndim != 2 or target.shape[0] < 2 or target.shape[1] != len(contexts):
            raise LatencyError(
                f"target_seconds must have one row per n = 1..n_max (n_max >= 2) and one "
                f"column per context ({len(contexts)}), got shape {target.shape}"
            )
        if draft.shape != (len(contexts),):
            raise LatencyError(
                f"draft_seconds must have one value per context ({len(contexts)}), got shape {draft.shape}"
            )
        if not (np.isfinite(target).all() and (target > 0).all()):
            raise LatencyError("target_seconds must be finite and > 0: a target forward cannot be free")
        if not (np.isfinite(draft).all() and (draft >= 0).all()):
            raise LatencyError("draft_seconds must be finite and >= 0")
        if batch_size != 1:
            raise LatencyError(
                f"batch_size {batch_size} is not supported: format version "
                f"{LATENCY_FORMAT_VERSION} models batch 1 only"
            )
        self.pair, self.device, self.dtype = str(pair), str(device), str(dtype)
        self.batch_size, self.kind = batch_size, str(kind)
        self.contexts = tuple(contexts)
        self.target_table, self.draft_table = target, draft
        self.target_table.setflags(write=False)
        self.draft_table.setflags(write=False)
        self.fit_error = fit_error
        self.measurement = dict(measurement or {})
        self._grid = np.array(contexts, dtype=np.float64)
        self._tables: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}
        self._rows: dict[
            int, tuple[float, list[float]]
        ] = {}  # context -> (draft, target by n): see step_seconds

    def __repr__(self) -> str:
        return (
            f"LatencyModel(kind={self.kind!r}, pair={self.pair!r}, device={self.device!r}, "
            f"dtype={self.dtype!r}, n_max={self.n_max}, contexts={list(self.contexts)})"
        )

    @property
    def n_max(self) -> int:
        """The largest measured number of new tokens per target forward (k_max + 1)."""
        return self.target_table.shape[0]

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
            elif n > self.n_max:  # beyond the profile: linear in n from the last two rows
                out[i] = rows[-1] + (n - self.n_max) * (rows[-1] - rows[-2])
        return out

    def _draft(self, context_lengths: np.ndarray) -> np.ndarray:
        return self._interpolate(self.draft_table, context_lengths)

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

    def draft_seconds(self, context_length: int) -> float:
        """One draft forward of one token after a sequence of ``context_length`` tokens."""
        self._check_context(context_length)
        return float(self._draft(np.array([context_length]))[0])

    def step_seconds(self, context_length: int, draft_forwards: int, proposed: int) -> tuple[float, float]:
        """(draft seconds, verify seconds) of one speculative step. The one definition.

        draft = ``draft_forwards`` * draft_seconds(context_length) (one forward per drafted
        position, the tau-stopped one included: :attr:`StepResult.draft_forwards`);
        verify = target_seconds(``proposed`` + 1, context_length).
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
            row = self._rows[context_length] = (self.draft_seconds(context_length), targets)
        draft, targets = row
        verify = (
            targets[proposed + 1]
            if proposed < self.n_max
            else self.target_seconds(proposed + 1, context_length)
        )
        return draft_forwards * draft, verify

    def step_seconds_array(
        self, context_lengths: np.ndarray, draft_forwards: np.ndarray, proposed: np.ndarray, context_window: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`step_seconds` for arrays of steps at once (the vectorised simulator's path).

        ``context_window`` bounds the context lengths (dense tables up to it are cached).
        Returns (draft seconds, verify seconds), arrays shaped like the inputs.
        """
        target, draft = self.tables(context_window, max(self.n_max, int(proposed.max(initial=0)) + 1))
        return draft[context_lengths] * draft_forwards, target[proposed + 1, context_lengths]

    def seconds(self, result: StepResult) -> tuple[float, float]:
        """(draft seconds, verify seconds) of an engine step: :meth:`step_seconds` of its counts."""
        return self.step_seconds(result.context_length, result.draft_forwards, result.proposed)

    @property
    def plain_tokens_per_s(self) -> float:
        """Plain decoding throughput: 1 / target_seconds(1, 256), at context 256
        (``PLAIN_REFERENCE_CONTEXT``: a ~100-token prompt plus a 128-token episode)."""
        return 1.0 / self.target_seconds(1, PLAIN_REFERENCE_CONTEXT)

    def tables(self, context_window: int, max_new_tokens: int) -> tuple[np.ndarray, np.ndarray]:
        """Dense lookup tables for simulators, equal to the scalar methods element by element.

        Args:
            context_window: the largest context length to tabulate.
            max_new_tokens: the largest number of new tokens per target forward (k_max + 1).

        Returns:
            ``target`` (max_new_tokens + 1, context_window + 1) with ``target[n, ctx]`` =
            target_seconds(n, ctx) (row 0 is zeros), and ``draft`` (context_window + 1,) with
            ``draft[ctx]`` = draft_seconds(ctx). Read-only and cached: do not modify.
        """
        if context_window < 0 or max_new_tokens < 0:
            raise ValueError(
                f"context_window and max_new_tokens must be >= 0, got {context_window}, {max_new_tokens}"
            )
        key = (int(context_window), int(max_new_tokens))
        if key not in self._tables:
            context_lengths = np.arange(context_window + 1)
            target = self._target(np.arange(max_new_tokens + 1), context_lengths)
            draft = self._draft(context_lengths)
            target.setflags(write=False)
            draft.setflags(write=False)
            self._tables[key] = (target, draft)
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
        """The constant model (scenario ``latency: constant``): no dependence on the context,
        target = target_forward_s + target_per_token_s * (n - 1), draft = draft_forward_s."""
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
            "target_seconds": self.target_table.tolist(),
            "draft_seconds": self.draft_table.tolist(),
            "fit_error": self.fit_error,
            "measurement": self.measurement,
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> LatencyModel:
        """Validate and build; any problem raises :class:`LatencyError` naming ``source``."""
        if not isinstance(data, Mapping) or data.get("format") != LATENCY_FORMAT:
            raise LatencyError(
                f'{source}: not a specrl latency file (no "format": "{LATENCY_FORMAT}"); {_RECALIBRATE}'
            )
        version = data.get("version")
        if version != LATENCY_FORMAT_VERSION:
            raise LatencyError(
                f"{source}: latency format version {version!r}, but this specrl reads version "
                f"{LATENCY_FORMAT_VERSION}; {_RECALIBRATE}"
            )
        required = (
            "kind",
            "pair",
            "device",
            "dtype",
            "batch_size",
            "contexts",
            "new_tokens",
            "target_seconds",
            "draft_seconds",
        )
        missing = [key for key in required if key not in data]
        if missing:
            raise LatencyError(f"{source}: missing key(s) {missing}; the file is incomplete: {_RECALIBRATE}")
        n_rows = len(data["target_seconds"]) if isinstance(data["target_seconds"], list) else -1
        if data["new_tokens"] != list(range(1, n_rows + 1)):
            raise LatencyError(
                f"{source}: 'new_tokens' must be [1, ..., n_max] with one 'target_seconds' "
                f"row each, got {data['new_tokens']!r} and {n_rows} rows; {_RECALIBRATE}"
            )
        try:
            return cls(
                data["pair"],
                data["device"],
                data["contexts"],
                data["target_seconds"],
                data["draft_seconds"],
                dtype=data["dtype"],
                batch_size=data["batch_size"],
                kind=data["kind"],
                fit_error=data.get("fit_error"),
                measurement=data.get("measurement"),
            )
        except (TypeError, ValueError) as error:  # LatencyError included
            raise LatencyError(f"{source}: {error}; {_RECALIBRATE}") from None

    def save(self, path: str | Path) -> None:
        """Write the JSON file atomically."""
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
        """Target ms by n x context, draft ms by context, and the held-out fit error."""
        header = "| n \\ context | " + " | ".join(str(c) for c in self.contexts) + " |"
        rule = "|---:|" + "---:|" * len(self.contexts)
        lines = [
            f"Latency model: pair `{self.pair}`, device `{self.device}`, dtype {self.dtype}, "
            f"batch {self.batch_size} ({self.kind}). Milliseconds per forward.",
            "",
            "Target forward over n new tokens:",
            "",
            header,
            rule,
        ]
        for n, row in enumerate(self.target_table, start=1):
            lines.append(f"| {n} | " + " | ".join(f"{1e3 * s:.3f}" for s in row) + " |")
        lines += [
            "",
            "Draft forward (one token):",
            "",
            header.replace("n \\ context", "context"),
            rule,
            "| draft | " + " | ".join(f"{1e3 * s:.3f}" for s in self.draft_table) + " |",
            "",
        ]
        plain = (
            f"Plain decoding at context {PLAIN_REFERENCE_CONTEXT}: {self.plain_tokens_per_s:.1f} tokens/s."
        )
        lines += [plain, "", _fit_error_line(self.fit_error)]
        return "\n".join(lines) + "\n"


def _fit_error_line(fit_error: dict[str, Any] | None) -> str:
    if not fit_error:
        return "Held-out fit error: n/a (no held-out contexts)."
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


def latency_path(pair: ModelPair) -> Path:
    """Where :func:`calibrated` caches the pair's model on this device:
    ``specrl_home()/latency/<pair>__<dtype>__<device key>.json`` (names made filename-safe)."""
    from specrl.zoo.build import specrl_home  # the zoo is only needed for its home folder

    name = f"{_slug(pair.name)}__{_dtype_name(pair.dtype)}__{device_key(pair.device)}.json"
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
    """Measure the pair's forward latencies on its device and fit a :class:`LatencyModel`.

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
        "repeats": repeats,
        "warmup_passes": 1,
        "statistic": "median",
        "fit": "exact in n, piecewise linear in context, clamped; isotonic along n, then context",
        "included": INCLUDED,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "platform": platform.platform(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host_cpus": os.cpu_count(),
    }
    model = LatencyModel(
        pair.name,
        device_key(pair.device),
        grid,
        target_table,
        draft_table,
        dtype=_dtype_name(pair.dtype),
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
            "draft": _relative_error(model._draft(np.array(heldout)), measured_draft),
        }
    if progress:
        print(_fit_error_line(model.fit_error))
    return model


def calibrated(
    pair: ModelPair, *, k_max: int = 8, recalibrate: bool = False, progress: bool = True
) -> LatencyModel:
    """The pair's latency model on its device: the cached file (:func:`latency_path`), or a
    fresh :func:`profile` saved there when it is missing, covers fewer than k_max + 1 new
    tokens, is unreadable, or ``recalibrate`` is set."""
    path = latency_path(pair)
    if path.is_file() and not recalibrate:
        try:
            model = LatencyModel.load(path)
        except LatencyError as error:
            warnings.warn(f"{error}; profiling again", stacklevel=2)
        else:
            if model.n_max >= k_max + 1:
                return model
    model = profile(pair, k_max=k_max, progress=progress)
    model.save(path)
    return model
