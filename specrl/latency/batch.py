"""Latency of a batched speculative step, over (batch size, tokens per row, context), per device.

A batched step (:mod:`specrl.engine.batch`) of B rows costs ``draft_forwards`` draft forwards
over (B, 1), one target forward over (B, n) with n = the most tokens a row feeds (its last token
and its proposals; the rows are right-padded to n), and the engine's work per row (acceptance,
bookkeeping)::

    draft  = draft_forwards * draft(B, ctx)
    verify = target(B, n, ctx) + step_seconds + B * row_seconds

The forwards are timed in isolation on the device, on a grid of batch sizes, tokens per row and
contexts (each a median of ``repeats``, device-synchronised), through the engine's own
:class:`~specrl.engine.batch_cache.BatchCache`; the engine's own work, ``step_seconds`` per step
and ``row_seconds`` per row, is learned from real batched steps: a non-negative least-squares
fit of (measured - modeled forwards) against B. Between grid points the tables are
linear in B and in the context; outside, the nearest point. :func:`batch_calibrated` measures
once per pair and device and caches the file next to the single-row model's.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specrl.io import write_text_atomic
from specrl.latency.fileformat import LatencyError
from specrl.latency.store import device_key, environment, latency_path
from specrl.models import ModelPair

BATCH_LATENCY_FORMAT = "specrl-batch-latency"
BATCH_LATENCY_VERSION = 1
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_CONTEXTS = (32, 160, 320)  # prompts and the scenarios' budgets (up to 128 new tokens)


@dataclass(frozen=True)
class BatchLatency:
    """Seconds of a batched step's parts (the module doc); tables indexed [B, (n,) context]."""

    batch_sizes: tuple[int, ...]
    new_tokens: tuple[int, ...]  # 1 .. k_max + 1
    contexts: tuple[int, ...]
    target: np.ndarray  # (len(batch_sizes), len(new_tokens), len(contexts)) seconds of one forward
    draft: np.ndarray  # (len(batch_sizes), len(contexts)) seconds of one (B, 1) draft forward
    row_seconds: float
    device: str
    pair: str
    measurement: dict[str, Any] | None = None
    step_seconds_fixed: float = 0.0  # the engine's work per step, whatever the batch size

    def __post_init__(self) -> None:
        shape = (len(self.batch_sizes), len(self.new_tokens), len(self.contexts))
        if np.shape(self.target) != shape or np.shape(self.draft) != shape[::2]:
            raise LatencyError(
                f"batch latency tables have shapes {np.shape(self.target)} and {np.shape(self.draft)}, "
                f"expected {shape} and {shape[::2]}"
            )

    @property
    def k_max(self) -> int:
        return self.new_tokens[-1] - 1

    def _at(self, table: np.ndarray, batch: float, context: float) -> np.ndarray:
        """``table`` ([B, ..., context]) at (batch, context): bilinear inside the grid, the nearest
        point outside it."""
        b0, b1, tb = _bracket(self.batch_sizes, batch)
        c0, c1, tc = _bracket(self.contexts, context)
        table = np.asarray(table)
        low = (1 - tc) * table[b0, ..., c0] + tc * table[b0, ..., c1]
        high = (1 - tc) * table[b1, ..., c0] + tc * table[b1, ..., c1]
        return (1 - tb) * low + tb * high

    def target_seconds(self, batch: int, new_tokens: int, context: float) -> float:
        """One target forward over (batch, new_tokens) after ``context`` tokens."""
        if not 1 <= new_tokens <= self.new_tokens[-1]:
            raise LatencyError(
                f"this batch latency model covers 1..{self.new_tokens[-1]} new tokens per row, not "
                f"{new_tokens}; calibrate with a larger k_max"
            )
        per_n = self._at(self.target, batch, context)
        return float(per_n[self.new_tokens.index(new_tokens)])

    def draft_seconds(self, batch: int, context: float, forwards: int = 1) -> float:
        return forwards * float(self._at(self.draft, batch, context)) if forwards else 0.0

    def step_seconds(
        self, batch: int, new_tokens: int, draft_forwards: int, context: float
    ) -> tuple[float, float]:
        """(draft seconds, verify seconds) of one batched step (the module doc)."""
        verify = (
            self.target_seconds(batch, new_tokens, context)
            + self.step_seconds_fixed
            + batch * self.row_seconds
        )
        return self.draft_seconds(batch, context, draft_forwards), verify

    def plain_tokens_per_s(self, batch: int, context: float) -> float:
        """Plain batched decoding: ``batch`` tokens per target forward of one token a row."""
        return batch / sum(self.step_seconds(batch, 1, 0, context))

    # ---- files ------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": BATCH_LATENCY_FORMAT,
            "version": BATCH_LATENCY_VERSION,
            "pair": self.pair,
            "device": self.device,
            "batch_sizes": list(self.batch_sizes),
            "new_tokens": list(self.new_tokens),
            "contexts": list(self.contexts),
            "target": np.asarray(self.target).tolist(),
            "draft": np.asarray(self.draft).tolist(),
            "row_seconds": self.row_seconds,
            "step_seconds": self.step_seconds_fixed,
            "measurement": self.measurement,
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>") -> BatchLatency:
        if not isinstance(data, dict) or data.get("format") != BATCH_LATENCY_FORMAT:
            raise LatencyError(f"{source} is not a specrl batch latency file; delete it to measure again")
        if data.get("version") != BATCH_LATENCY_VERSION:
            raise LatencyError(
                f"{source} has batch latency format version {data.get('version')}, this specrl reads "
                f"{BATCH_LATENCY_VERSION}; delete it to measure again"
            )
        try:
            return cls(
                batch_sizes=tuple(int(b) for b in data["batch_sizes"]),
                new_tokens=tuple(int(n) for n in data["new_tokens"]),
                contexts=tuple(int(c) for c in data["contexts"]),
                target=np.asarray(data["target"], dtype=float),
                draft=np.asarray(data["draft"], dtype=float),
                row_seconds=float(data["row_seconds"]),
                step_seconds_fixed=float(data["step_seconds"]),
                device=str(data["device"]),
                pair=str(data["pair"]),
                measurement=data.get("measurement"),
            )
        except (KeyError, TypeError, ValueError) as error:
            raise LatencyError(f"{source} is not a valid batch latency file ({error}); delete it") from None

    def save(self, path: str | Path) -> None:
        write_text_atomic(Path(path), json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> BatchLatency:
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as error:
            raise LatencyError(f"cannot read the batch latency file {path} ({error}); delete it") from None
        return cls.from_dict(data, str(path))


def _bracket(grid: Sequence[int], x: float) -> tuple[int, int, float]:
    """The grid points around ``x`` and its weight on the upper one (x clamped to the grid)."""
    if len(grid) == 1 or x <= grid[0]:
        return 0, 0, 0.0
    if x >= grid[-1]:
        return len(grid) - 1, len(grid) - 1, 0.0
    upper = next(i for i, g in enumerate(grid) if g > x)
    return upper - 1, upper, (x - grid[upper - 1]) / (grid[upper] - grid[upper - 1])


def batch_latency_path(pair: Any) -> Path:
    """The cache file of a pair's batch latency on this device (next to the single-row model's)."""
    single = latency_path(pair)
    return single.with_name(single.stem + "__batch.json")


@torch.inference_mode()
def _feed_seconds(cache, tokens: torch.Tensor, kept: torch.Tensor, clock, repeats: int) -> float:
    """The median seconds of feeding ``tokens`` to ``cache`` (then cut back to ``kept``), after one
    untimed feed that warms the shape."""
    times = []
    for repeat in range(repeats + 1):
        start = clock.now()
        cache.feed(tokens)
        elapsed = clock.now() - start
        cache.rollback(kept)
        if repeat:
            times.append(elapsed)
    return statistics.median(times)


def measure_batch_latency(
    pair: ModelPair,
    *,
    k_max: int = 8,
    batch_sizes: Sequence[int] = DEFAULT_BATCH_SIZES,
    contexts: Sequence[int] | None = None,
    repeats: int = 3,
    progress: bool = True,
) -> BatchLatency:
    """Time the forwards on the grid, then the engine's work per row from real batched steps."""
    from tqdm.auto import tqdm

    from specrl.engine.batch_cache import BatchCache
    from specrl.engine.timing import DeviceClock

    room = pair.context_length - (k_max + 1)
    contexts = tuple(contexts or sorted({min(c, room) for c in DEFAULT_CONTEXTS}))
    clock = DeviceClock(pair.device)
    generator = torch.Generator().manual_seed(0)
    n_tokens = tuple(range(1, k_max + 2))
    target = np.zeros((len(batch_sizes), len(n_tokens), len(contexts)))
    draft = np.zeros((len(batch_sizes), len(contexts)))
    bar = tqdm(total=len(batch_sizes) * len(contexts), desc="batch latency", disable=not progress)
    for i, batch in enumerate(batch_sizes):
        for c, context in enumerate(contexts):
            ids = torch.randint(0, pair.vocab_size, (batch, context + k_max + 1), generator=generator)
            ids = ids.to(pair.device)
            kept = torch.full((batch,), context, device=pair.device)
            for model, table in ((pair.target, target), (pair.draft, draft)):
                cache = BatchCache(model, pair.vocab_size, batch)
                cache.feed(ids[:, :context], keep=1)
                sizes = n_tokens if table is target else (1,)
                for j, n in enumerate(sizes):
                    seconds = _feed_seconds(cache, ids[:, context : context + n], kept, clock, repeats)
                    if table is target:
                        target[i, j, c] = seconds
                    else:
                        draft[i, c] = seconds
            bar.update()
    bar.close()
    model = BatchLatency(
        batch_sizes=tuple(batch_sizes),
        new_tokens=n_tokens,
        contexts=contexts,
        target=target,
        draft=draft,
        row_seconds=0.0,
        device=device_key(pair.device),
        pair=pair.name,
        measurement={**environment(), "repeats": repeats},
    )
    return _with_row_seconds(model, pair, k_max)


def _with_row_seconds(model: BatchLatency, pair: ModelPair, k_max: int) -> BatchLatency:
    """Learn the engine's own work per step and per row: real batched steps against their modeled
    forwards, fit by non-negative least squares on the batch size."""
    from scipy.optimize import nnls

    from specrl.engine.batch import BatchGeneration
    from specrl.engine.sampling import SamplingConfig
    from specrl.engine.types import Action

    rng = np.random.default_rng(0)
    sizes, residuals = [], []
    for batch in (2, 8, 32):
        prompts = [rng.integers(0, pair.vocab_size, 24).tolist() for _ in range(batch)]
        generation = BatchGeneration(pair, prompts, 24, SamplingConfig(0.0), stop_at_eos=False)
        while not generation.done:
            step = generation.step(Action(min(4, k_max)))
            fed = max(result.proposed for result in step.results) + 1
            forwards = max(len(result.confidences) for result in step.results)
            context = statistics.mean(result.context_length for result in step.results)
            draft, verify = model.step_seconds(step.batch_size, fed, forwards, context)
            sizes.append(step.batch_size)
            residuals.append(step.seconds - draft - verify)
    (fixed, per_row), _ = nnls(
        np.stack([np.ones(len(sizes)), np.asarray(sizes, float)], 1), np.asarray(residuals)
    )
    return BatchLatency(
        **{**model.__dict__, "row_seconds": float(per_row), "step_seconds_fixed": float(fixed)}
    )


def cached_batch_latency(pair: Any, *, k_max: int = 8) -> BatchLatency | None:
    """The cached batch latency of ``pair`` (which needs only name, device and dtype) when it
    covers ``k_max``, else None (missing, too few tokens per row, or unreadable)."""
    path = batch_latency_path(pair)
    if not path.is_file():
        return None
    try:
        model = BatchLatency.load(path)
    except LatencyError:
        return None
    return model if model.k_max >= k_max else None


def batch_calibrated(
    pair: ModelPair, *, k_max: int = 8, recalibrate: bool = False, progress: bool = True
) -> BatchLatency:
    """The pair's batch latency on its device: the cached file, or measured and saved (also when
    it covers fewer than k_max + 1 tokens per row, or is unreadable)."""
    model = None if recalibrate else cached_batch_latency(pair, k_max=k_max)
    if model is None:
        model = measure_batch_latency(pair, k_max=k_max, progress=progress)
        model.save(batch_latency_path(pair))
    return model
