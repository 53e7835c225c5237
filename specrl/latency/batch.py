"""Latency of a batched speculative step, over (batch size, tokens per row, cache width), per device.

A batched step (:mod:`specrl.engine.generation`) of B rows costs ``draft_forwards`` draft forwards
over (B, 1) and one target forward over (B, n), n = the most tokens a row feeds (its last token
and its proposals; the rows are right-padded to n). Both read the batch's whole slot grid
(:class:`~specrl.engine.cache.KVCache`): W slots a row, holes included, which is more
than the rows' mean context once rows have rejected tokens or joined mid-flight (see
:class:`SlotGrid`)::

    draft  = draft_forwards * draft(B, W) * draft_scale(B)
    verify = target(B, n, W) * verify_scale(B, n)
    prefill(m prompts joining B rows) = c0 + c1 * m p + c2 * m p^2 + c3 * (B + m) max(W, p)

with p the longest joining prompt (the prompts are prefilled together, right-padded, then their
caches join the batch's, a copy of every row's slots).

1. The forwards are timed in isolation on the device, on a grid of batch sizes, tokens per row
   and widths (each a median of ``repeats``, device-synchronised), through the engine's own cache.
2. Real continuous batching (static k, prompts joining as rows finish) then calibrates the
   rest. At each batch size the ks run in interleaved rounds (forward, then backward), so that
   the machine's drift, which moves a run's speed by up to a tenth on a shared CPU, falls on
   every k alike: at large batches the ks differ by less than that. Per batch size (and tokens
   per row, for verification; linear in n between the ks it ran), the scales are measured over
   modeled seconds of its steps (they hold the engine's own work per row, and the masks of a
   grid with holes, which the isolated forwards do not pay); the prefill coefficients are a
   non-negative least-squares fit over its admissions.

Between grid points the tables are linear in B and in W; outside, the nearest point.
:func:`batch_calibrated` measures once per pair and device and caches the file next to the
single-row model's.
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
BATCH_LATENCY_VERSION = 3  # 2: widths, per-size scales and prefill from real steps; 3: k = 1, rounds
DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)
DEFAULT_CONTEXTS = (32, 160, 320, 480)  # cache widths: prompts, budgets (128 new tokens), holes
CALIBRATION_KS = (0, 1, 2, 4)  # the static k of the real steps that calibrate the model
CALIBRATION_ROUNDS = 3  # interleaved rounds over CALIBRATION_KS at each batch size


@dataclass(frozen=True)
class BatchLatency:
    """Seconds of a batched step's parts (the module doc); tables indexed [B, (n,) width]."""

    batch_sizes: tuple[int, ...]
    new_tokens: tuple[int, ...]  # 1 .. k_max + 1
    contexts: tuple[int, ...]  # cache widths (slots a row)
    target: np.ndarray  # (len(batch_sizes), len(new_tokens), len(contexts)) seconds of one forward
    draft: np.ndarray  # (len(batch_sizes), len(contexts)) seconds of one (B, 1) draft forward
    device: str
    pair: str
    draft_scale: np.ndarray | None = None  # (len(batch_sizes),); None: 1 (the forwards alone)
    verify_scale: np.ndarray | None = None  # (len(batch_sizes), len(new_tokens))
    prefill: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)  # c0..c3 of the module doc
    measurement: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        shape = (len(self.batch_sizes), len(self.new_tokens), len(self.contexts))
        if np.shape(self.target) != shape or np.shape(self.draft) != shape[::2]:
            raise LatencyError(
                f"batch latency tables have shapes {np.shape(self.target)} and {np.shape(self.draft)}, "
                f"expected {shape} and {shape[::2]}"
            )
        for name, expected in (("draft_scale", shape[:1]), ("verify_scale", shape[:2])):
            scale = getattr(self, name)
            if scale is not None and np.shape(scale) != expected:
                raise LatencyError(f"{name} has shape {np.shape(scale)}, expected {expected}")
        if len(self.prefill) != 4:
            raise LatencyError(f"prefill has {len(self.prefill)} coefficients, expected 4")

    @property
    def k_max(self) -> int:
        return self.new_tokens[-1] - 1

    def _in_batch(self, table: np.ndarray, batch: float) -> np.ndarray:
        """``table`` ([B, ...]) at ``batch``: linear between grid sizes, the nearest outside."""
        b0, b1, tb = _bracket(self.batch_sizes, batch)
        table = np.asarray(table)
        return (1 - tb) * table[b0] + tb * table[b1]

    def _at(self, table: np.ndarray, batch: float, width: float) -> np.ndarray:
        """``table`` ([B, ..., width]) at (batch, width): bilinear inside the grid, the nearest
        point outside it."""
        c0, c1, tc = _bracket(self.contexts, width)
        by_width = self._in_batch(table, batch)
        return (1 - tc) * by_width[..., c0] + tc * by_width[..., c1]

    def target_seconds(self, batch: int, new_tokens: int, width: float) -> float:
        """One target forward over (batch, new_tokens) on a grid of ``width`` slots, as timed alone."""
        if not 1 <= new_tokens <= self.new_tokens[-1]:
            raise LatencyError(
                f"this batch latency model covers 1..{self.new_tokens[-1]} new tokens per row, not "
                f"{new_tokens}; calibrate with a larger k_max"
            )
        per_n = self._at(self.target, batch, width)
        return float(per_n[self.new_tokens.index(new_tokens)])

    def draft_seconds(self, batch: int, width: float, forwards: int = 1) -> float:
        """``forwards`` draft forwards over (batch, 1), as timed alone."""
        return forwards * float(self._at(self.draft, batch, width)) if forwards else 0.0

    def step_seconds(
        self, batch: int, new_tokens: int, draft_forwards: int, width: float
    ) -> tuple[float, float]:
        """(draft seconds, verify seconds) of one batched step on a grid of ``width`` slots."""
        draft = self.draft_seconds(batch, width, draft_forwards)
        verify = self.target_seconds(batch, new_tokens, width)
        if self.draft_scale is not None:
            draft *= float(self._in_batch(self.draft_scale, batch))
        if self.verify_scale is not None:
            verify *= float(self._in_batch(self.verify_scale, batch)[self.new_tokens.index(new_tokens)])
        return draft, verify

    def prefill_seconds(self, prompt_lengths: Sequence[int], batch: int = 0, width: int = 0) -> float:
        """Admitting prompts of ``prompt_lengths`` tokens (their caches hold all but the last)
        into a batch of ``batch`` rows on ``width`` slots (the module doc)."""
        if not prompt_lengths:
            return 0.0
        return float(np.dot(self.prefill, _prefill_terms(prompt_lengths, batch, width)))

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
            "draft_scale": None if self.draft_scale is None else np.asarray(self.draft_scale).tolist(),
            "verify_scale": None if self.verify_scale is None else np.asarray(self.verify_scale).tolist(),
            "prefill": list(self.prefill),
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
                draft_scale=_array(data["draft_scale"]),
                verify_scale=_array(data["verify_scale"]),
                prefill=tuple(float(c) for c in data["prefill"]),
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


def step_shape(rows: Sequence[Any]) -> tuple[int, int]:
    """A batched step's (tokens fed a row, draft forwards) from its rows' results (anything with
    ``proposed`` and one ``confidences`` entry per draft forward): the rows are padded to the
    longest feed, and drafting runs until the last row stops."""
    return max(row.proposed for row in rows) + 1, max(len(row.confidences) for row in rows)


def _array(values: Any) -> np.ndarray | None:
    return None if values is None else np.asarray(values, dtype=float)


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
def _feed_seconds(cache, tokens: torch.Tensor, kept: list[int], clock, repeats: int) -> float:
    """The median seconds of feeding ``tokens`` to ``cache`` (then cut back to ``kept``), after one
    untimed feed that warms the shape."""
    times = []
    for repeat in range(repeats + 1):
        start = clock.now()
        cache.feed(tokens, keep=tokens.shape[1])  # a verification's logits at every column
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
    prompts: Sequence[Sequence[int]] | None = None,
    ks: Sequence[int] = CALIBRATION_KS,
    rounds: int = CALIBRATION_ROUNDS,
    max_new_tokens: int = 48,
    progress: bool = True,
) -> BatchLatency:
    """Time the forwards on the grid, then calibrate on real continuous batching of ``prompts``
    (token ids; default: random tokens, 16 to 120 of them) at every batch size and k in ``ks``,
    ``rounds`` interleaved rounds of them."""
    from tqdm.auto import tqdm

    from specrl.engine.cache import KVCache
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
            kept = [context] * batch
            for model, table in ((pair.target, target), (pair.draft, draft)):
                cache = KVCache(model, pair.vocab_size, rows=batch)
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
    alone = BatchLatency(
        batch_sizes=tuple(batch_sizes),
        new_tokens=n_tokens,
        contexts=contexts,
        target=target,
        draft=draft,
        device=device_key(pair.device),
        pair=pair.name,
    )
    if prompts is None:
        rng = np.random.default_rng(0)
        top = min(120, pair.context_length - max_new_tokens - 1)
        count = max(batch_sizes) + max(batch_sizes) // 2
        prompts = [rng.integers(0, pair.vocab_size, rng.integers(min(16, top), top + 1)).tolist()
                   for _ in range(count)]  # fmt: skip
    ks = [k for k in ks if k <= k_max]
    steps, admissions = _real_steps(pair, prompts, batch_sizes, ks, rounds, max_new_tokens, progress)
    draft_scale, verify_scale = _scales(alone, steps)
    return BatchLatency(
        **{
            **alone.__dict__,
            "draft_scale": draft_scale,
            "verify_scale": verify_scale,
            "prefill": _prefill_fit(admissions),
            "measurement": {
                **environment(),
                "repeats": repeats,
                "calibration": {
                    "ks": list(ks),
                    "rounds": rounds,
                    "max_new_tokens": max_new_tokens,
                    "steps": len(steps),
                    "admissions": len(admissions),
                    "prompts": len(prompts),
                },
            },  # fmt: skip
        }
    )


def calibration_runs(batch_sizes: Sequence[int], ks: Sequence[int], rounds: int) -> list[tuple[int, int]]:
    """The (batch size, k) runs that calibrate the model, in order: at each batch size, ``rounds``
    rounds over ``ks``, every other one backwards (k = 0, 1, 2, 2, 1, 0, 0, ...)."""
    ks = list(ks)
    return [
        (batch, k) for batch in batch_sizes for turn in range(rounds) for k in (ks[::-1] if turn % 2 else ks)
    ]


def _real_steps(
    pair: ModelPair,
    prompts: Sequence[Sequence[int]],
    batch_sizes: Sequence[int],
    ks: Sequence[int],
    rounds: int,
    max_new_tokens: int,
    progress: bool,
) -> tuple[list[tuple], list[tuple]]:
    """Continuous batching at each batch size B (B + B // 2 of the prompts, all waiting; a
    finished row's place goes to the next) and static k, in the order of :func:`calibration_runs`:
    every step's (rows, tokens fed a row, draft forwards, width, draft seconds, verify seconds)
    and every admission's (prompt lengths, rows before, width before, seconds)."""
    from tqdm.auto import tqdm

    from specrl.engine.generation import Generation
    from specrl.engine.sampling import SamplingConfig
    from specrl.engine.types import Action

    steps, admissions = [], []
    runs = calibration_runs(batch_sizes, ks, rounds)
    for batch, k in tqdm(runs, desc="batch latency: real steps", disable=not progress):
        queue = [list(prompt) for prompt in prompts[: batch + batch // 2]]
        first, queue = queue[:batch], queue[batch:]
        generation = Generation(pair, first, max_new_tokens, SamplingConfig(0.0), stop_at_eos=False)
        admissions.append(([len(p) for p in first], 0, 0, generation.prefill_seconds))
        while not generation.done:
            step = generation.step(Action(k))
            fed, forwards = step_shape(step.results)
            seconds = (step.draft_seconds, step.verify_seconds)
            steps.append((step.batch_size, fed, forwards, step.slots, *seconds))
            free = batch - generation.batch_size
            if queue and free:
                joining, queue = queue[:free], queue[free:]
                rows, width = generation.batch_size, generation.target.slots
                before = generation.prefill_seconds
                generation.add(joining)
                seconds = generation.prefill_seconds - before
                admissions.append(([len(p) for p in joining], rows, width, seconds))
    return steps, admissions


def _scales(alone: BatchLatency, steps: list[tuple]) -> tuple[np.ndarray, np.ndarray]:
    """The steps' measured seconds over their forwards timed alone: for drafting per batch size of
    the grid, for verification per batch size and tokens per row. Each step weighs on the two
    sizes around its own, as the tables interpolate; tokens per row no step fed are linear
    between those fed (the nearest beyond them), and a size no step weighs on takes the nearest
    fitted size's scales."""
    sizes, n = len(alone.batch_sizes), len(alone.new_tokens)
    draft = np.zeros((2, sizes))  # [measured, modeled][size]
    verify = np.zeros((2, sizes, n))  # [measured, modeled][size, tokens per row]
    for rows, fed, forwards, width, draft_seconds, verify_seconds in steps:
        b0, b1, t = _bracket(alone.batch_sizes, rows)
        modeled = alone.step_seconds(rows, fed, forwards, width)
        for index, weight in ((b0, 1 - t), (b1, t)):
            if forwards:
                draft[:, index] += weight * np.array([draft_seconds, modeled[0]])
            verify[:, index, alone.new_tokens.index(fed)] += weight * np.array([verify_seconds, modeled[1]])
    with np.errstate(divide="ignore", invalid="ignore"):
        draft_scale, verify_scale = draft[0] / draft[1], verify[0] / verify[1]
    for b in range(sizes):  # fill each size's tokens per row from those it fed
        fed = np.flatnonzero(verify[1, b] > 0)
        if len(fed):
            tokens = np.asarray(alone.new_tokens)
            verify_scale[b] = np.interp(tokens, tokens[fed], verify_scale[b, fed])
    return _nearest_fitted(draft_scale, draft[1] > 0), _nearest_fitted(verify_scale, verify[1].sum(1) > 0)


def _nearest_fitted(scale: np.ndarray, fitted: np.ndarray) -> np.ndarray:
    """``scale`` with each size that has no data taking the nearest fitted size's (1 if none is)."""
    have = np.flatnonzero(fitted)
    if not len(have):
        return np.ones_like(scale)
    return np.stack([scale[have[np.argmin(np.abs(have - b))]] for b in range(len(scale))])


def _prefill_terms(prompt_lengths: Sequence[int], batch: int, width: int) -> list[float]:
    """The prefill model's terms (the module doc): 1, m p, m p^2, and the slots a join copies."""
    m, p = len(prompt_lengths), max(prompt_lengths) - 1
    return [1.0, m * p, m * p * p, (batch + m) * max(width, p) if batch else 0.0]


def _prefill_fit(admissions: list[tuple]) -> tuple[float, float, float, float]:
    """The prefill coefficients: non-negative least squares of the admissions' relative errors
    (a one-prompt join weighs as much as a batch's first prefill)."""
    from scipy.optimize import nnls

    terms = np.asarray([_prefill_terms(lengths, batch, width) for lengths, batch, width, _ in admissions])
    seconds = np.asarray([seconds for *_, seconds in admissions])
    coefficients, _ = nnls(terms / seconds[:, None], np.ones(len(seconds)))
    return tuple(float(c) for c in coefficients)


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
    pair: ModelPair,
    *,
    k_max: int = 8,
    prompts: Sequence[Sequence[int]] | None = None,
    recalibrate: bool = False,
    progress: bool = True,
) -> BatchLatency:
    """The pair's batch latency on its device: the cached file, or measured (calibrated on
    ``prompts``, see :func:`measure_batch_latency`) and saved; also measured when the file covers
    fewer than k_max + 1 tokens per row, or is unreadable."""
    model = None if recalibrate else cached_batch_latency(pair, k_max=k_max)
    if model is None:
        model = measure_batch_latency(pair, k_max=k_max, prompts=prompts, progress=progress)
        model.save(batch_latency_path(pair))
    return model
