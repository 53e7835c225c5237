"""The trace format: what the trace-replay simulator needs to replay the real loop exactly.

A trace is one episode of a scenario decoded plainly by the target (greedy or sampled), plus one
teacher-forced forward of each model over it (docs/design.md section 4). For every generated
position j of a segment (context = prompt + y_<j):

- ``confidence[j]``, ``entropy[j]``: max_v q_j(v) and the entropy of q_j (after the sampling
  processing).
- ``accept_prob[j]``: P(a proposal at j is accepted | the target emits y_j): greedy, 1 if
  argmax q_j == y_j else 0; sampled, min(1, q_j(y_j) / p_j(y_j)).
- ``accepted_ap[j]``: the engine's ``acceptance_probs`` entry of an accepted y_j,
  min(1, p_j(y_j) / q_j(y_j)) (greedy: 1).
- ``off_*[j, i]``, i < k_max: the draft's own continuation past a rejection at j: the rejected
  proposal (greedy: argmax q_j; sampled: a draw from norm(max(0, q_j - p_j))), then its next
  proposals on that wrong context, with their confidences, entropies and ``acceptance_probs``
  entries (column 0 of the confidences repeats the on-trajectory value; 0 where no rejection
  can happen).

Greedy replay reproduces the real loop exactly; sampled, in distribution (a rejection's
continuation is one stored draw). ``meta["drafters"]`` lists the drafters a set replays (none:
the draft only). Each other model drafter stores the fields above as ``<name>/confidence`` and so
on; the ``cascade`` replays ``draft-mid``'s (:data:`REPLAYED_AS`). The n-gram lookup stores, per
position, ``ngram/available`` (tokens a lookup there could propose), ``ngram/order`` (the length
of its match), ``ngram/match`` (how many of them lead y_j, y_j+1, ...: exactly what a step
accepts) and ``ngram/ap[j, i]`` (the ``acceptance_probs`` entry of its token i).

A segment ends at its budget or at EOS; after an EOS the trajectory runs k_max tokens further
(``stored`` > ``end``): the engine drafts past an EOS it has not seen. Files are ``.npz`` archives
with a format version and a schema check on load (``TraceError`` names the file and the fix).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from specrl.features import LOOKUP_DRAFTER

TRACE_FORMAT_VERSION = 1

# name -> (dtype kind, number of dimensions); the schema a file must satisfy.
SEGMENT_FIELDS = {
    "segment_trace": ("i", 1),
    "segment_prompt_length": ("i", 1),
    "segment_budget": ("i", 1),
    "segment_end": ("i", 1),
    "segment_eos": ("b", 1),
    "segment_offset": ("i", 1),
    "segment_stored": ("i", 1),
}
TRACE_FIELDS = {
    "trace_domain": ("U", 1),
    "trace_prompt_index": ("i", 1),
    "trace_seed": ("i", 1),
    "trace_first_segment": ("i", 1),
    "trace_segments": ("i", 1),
}
POSITION_FIELDS = {
    "tokens": ("i", 1),
    "confidence": ("f", 1),
    "entropy": ("f", 1),
    "accept_prob": ("f", 1),
    "accepted_ap": ("f", 1),
    "off_confidence": ("f", 2),
    "off_entropy": ("f", 2),
    "off_ap": ("f", 2),
}
MODEL_FIELDS = {name: spec for name, spec in POSITION_FIELDS.items() if name != "tokens"}
LOOKUP_FIELDS = {"available": ("i", 1), "order": ("i", 1), "match": ("i", 1), "ap": ("f", 2)}
# A drafter replayed from another's fields: the cascade proposes its middle model's text and law.
REPLAYED_AS = {"cascade": "draft-mid"}
DEFAULT_DRAFTERS = ("draft",)

META_KEYS = (
    "format_version",
    "pair",
    "scenario",
    "split",
    "k_max",
    "sampling",
    "context_window",
    "vocab_size",
    "max_new_tokens",
)


class TraceError(ValueError):
    """A trace file is missing, corrupt or incompatible; the message says how to fix it."""


def analysed_drafters(drafters: Sequence[str]) -> list[str]:
    """The drafters whose fields a trace of ``drafters`` stores: the draft first, each other once,
    a cascade as the middle model it replays."""
    return list(dict.fromkeys(["draft", *(REPLAYED_AS.get(d, d) for d in drafters)]))


def stored_drafters(meta: dict[str, Any]) -> list[str]:
    """The drafters other than the draft whose fields a trace set of ``meta`` stores."""
    return analysed_drafters(meta.get("drafters", DEFAULT_DRAFTERS))[1:]


def drafter_fields(drafter: str) -> dict[str, tuple[str, int]]:
    """The schema of one stored drafter's fields."""
    return LOOKUP_FIELDS if drafter == LOOKUP_DRAFTER else MODEL_FIELDS


@dataclass
class ModelFields:
    """A model drafter's position fields (the module doc); a :class:`Segment` holds the draft's."""

    confidence: list[float]
    entropy: list[float]
    accept_prob: list[float]
    accepted_ap: list[float]
    off_confidence: list[list[float]]
    off_entropy: list[list[float]]
    off_ap: list[list[float]]


@dataclass
class LookupFields:
    """The n-gram lookup's position fields (the module doc)."""

    available: list[int]
    order: list[int]
    match: list[int]
    ap: list[list[float]]


def make_fields(drafter: str, values: dict[str, list]) -> ModelFields | LookupFields:
    """The fields object of ``drafter`` from its lists (as :func:`~specrl.traces.analyse_segment` gives)."""
    return (LookupFields if drafter == LOOKUP_DRAFTER else ModelFields)(**values)


@dataclass
class Segment(ModelFields):
    """One segment of a trace (an episode has one, or one per domain shift), as Python lists
    for fast scalar replay. Position j generates token j of the segment. Its own model fields
    are the draft's; ``others`` holds every other drafter's."""

    prompt_length: int  # context length when the segment starts
    budget: int  # the engine generation's max_new_tokens
    end: int  # tokens the segment emits (EOS included)
    eos: bool  # ended by EOS (else by its budget or the context window)
    tokens: list[int]
    others: dict[str, ModelFields | LookupFields] = field(default_factory=dict)  # drafters but the draft

    def fields(self, drafter: str) -> Segment | ModelFields | LookupFields:
        """What ``drafter`` replays: the segment itself for the draft, else its stored fields."""
        if drafter == "draft":
            return self
        stored = REPLAYED_AS.get(drafter, drafter)
        if stored not in self.others:
            raise TraceError(
                f"this trace has no fields of the drafter {drafter!r} (it holds "
                f"{['draft', *self.others]}); collect traces of a scenario whose `drafters:` list names it"
            )
        return self.others[stored]


@dataclass
class Trace:
    """One recorded episode."""

    domain: str
    prompt_index: int
    seed: int  # the env reset seed that produced it
    segments: list[Segment]

    @property
    def tokens(self) -> int:
        return sum(s.end for s in self.segments)


class TraceSet:
    """Many traces of one scenario and split, stored as flat arrays (positions of every
    segment concatenated; ``segment_offset`` indexes them) for vectorised replay."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict[str, Any], source: str = "<memory>") -> None:
        self.arrays = arrays
        self.meta = meta
        self.source = source

    # ---- facts -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.arrays["trace_domain"])

    @property
    def k_max(self) -> int:
        return int(self.meta["k_max"])

    @property
    def drafters(self) -> tuple[str, ...]:
        """The drafters these traces replay (the draft only for files without the key)."""
        return tuple(self.meta.get("drafters", DEFAULT_DRAFTERS))

    def stored_drafters(self) -> list[str]:
        """The drafters other than the draft whose fields are stored."""
        return stored_drafters(self.meta)

    @property
    def greedy(self) -> bool:
        return float(self.meta["sampling"]["temperature"]) == 0.0

    @property
    def domains(self) -> list[str]:
        return [str(d) for d in self.arrays["trace_domain"]]

    def indices_of(self, domain: str) -> list[int]:
        return [i for i, d in enumerate(self.domains) if d == domain]

    @cached_property
    def traces(self) -> list[Trace]:
        """Every trace as Python objects (built once; scalar replay indexes lists fast)."""
        a = self.arrays
        segments = []
        stored = self.stored_drafters()
        for s in range(len(a["segment_trace"])):
            lo = int(a["segment_offset"][s])
            hi = lo + int(a["segment_stored"][s])
            segments.append(
                Segment(
                    prompt_length=int(a["segment_prompt_length"][s]),
                    budget=int(a["segment_budget"][s]),
                    end=int(a["segment_end"][s]),
                    eos=bool(a["segment_eos"][s]),
                    **{name: a[name][lo:hi].tolist() for name in POSITION_FIELDS},
                    others={
                        d: make_fields(d, {f: a[f"{d}/{f}"][lo:hi].tolist() for f in drafter_fields(d)})
                        for d in stored
                    },
                )
            )
        return [
            Trace(
                domain=str(a["trace_domain"][t]),
                prompt_index=int(a["trace_prompt_index"][t]),
                seed=int(a["trace_seed"][t]),
                segments=segments[
                    int(a["trace_first_segment"][t]) : int(a["trace_first_segment"][t])
                    + int(a["trace_segments"][t])
                ],
            )
            for t in range(len(self))
        ]

    # ---- building, joining, files ------------------------------------------------------

    @classmethod
    def from_traces(cls, traces: Sequence[Trace], meta: dict[str, Any]) -> TraceSet:
        k_max = int(meta["k_max"])
        segments = [s for t in traces for s in t.segments]
        lengths = [len(s.tokens) for s in segments]
        arrays: dict[str, np.ndarray] = {
            "trace_domain": np.array([t.domain for t in traces], dtype=str),
            "trace_prompt_index": np.array([t.prompt_index for t in traces], dtype=np.int64),
            "trace_seed": np.array([t.seed for t in traces], dtype=np.int64),
            "trace_first_segment": np.cumsum([0] + [len(t.segments) for t in traces])[:-1].astype(np.int64),
            "trace_segments": np.array([len(t.segments) for t in traces], dtype=np.int64),
            "segment_trace": np.repeat(np.arange(len(traces)), [len(t.segments) for t in traces]).astype(
                np.int64
            ),
            "segment_prompt_length": np.array([s.prompt_length for s in segments], dtype=np.int64),
            "segment_budget": np.array([s.budget for s in segments], dtype=np.int64),
            "segment_end": np.array([s.end for s in segments], dtype=np.int64),
            "segment_eos": np.array([s.eos for s in segments], dtype=bool),
            "segment_offset": np.cumsum([0] + lengths)[:-1].astype(np.int64),
            "segment_stored": np.array(lengths, dtype=np.int64),
        }
        for name, (kind, ndim) in POSITION_FIELDS.items():
            arrays[name] = _column([getattr(s, name) for s in segments], kind, ndim, k_max)
        for drafter in stored_drafters(meta):
            for name, (kind, ndim) in drafter_fields(drafter).items():
                values = [getattr(s.fields(drafter), name) for s in segments]
                arrays[f"{drafter}/{name}"] = _column(values, kind, ndim, k_max)
        for name in ("segment_trace", "segment_offset", "trace_first_segment"):
            arrays[name] = arrays[name].reshape(-1)
        return cls(arrays, {**meta, "format_version": TRACE_FORMAT_VERSION})

    @classmethod
    def concatenate(cls, sets: Sequence[TraceSet]) -> TraceSet:
        """One set holding the traces of several (same pair, sampling and k_max)."""
        if not sets:
            raise ValueError("nothing to concatenate")
        for other in sets[1:]:
            facts = ("pair", "k_max", "sampling", "context_window", "drafters")
            for key, ours, theirs in zip(facts, _joined(sets[0]), _joined(other), strict=True):
                if ours != theirs:
                    raise TraceError(
                        f"cannot join trace sets with different {key}: {ours!r} "
                        f"({sets[0].source}) vs {theirs!r} ({other.source})"
                    )
        traces = [t for s in sets for t in s.traces]
        meta = {**sets[0].meta, "scenario": "+".join(dict.fromkeys(s.meta["scenario"] for s in sets))}
        return cls.from_traces(traces, meta)

    def save(self, path: str | Path) -> Path:
        """Write atomically (a temporary file in the same folder, then a rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        np.savez_compressed(buffer, meta=np.array(json.dumps(self.meta)), **self.arrays)
        tmp = path.with_name(f".{path.name}.{time.time_ns()}.tmp")
        tmp.write_bytes(buffer.getvalue())
        tmp.replace(path)
        return path

    @classmethod
    def load(cls, path: str | Path) -> TraceSet:
        """Read a trace file and check its version and schema."""
        path = Path(path)
        fix = "collect it again: specrl collect (or delete the file to rebuild it)"
        if not path.is_file():
            raise TraceError(f"trace file '{path}' does not exist; {fix}")
        try:
            with np.load(path, allow_pickle=False) as archive:
                contents = {name: archive[name] for name in archive.files}
            meta = json.loads(str(contents.pop("meta")))
        except Exception as error:  # noqa: BLE001 - any failure to parse is a corrupt file
            raise TraceError(
                f"trace file '{path}' is not a readable specrl trace archive ({error}); {fix}"
            ) from None
        missing = [k for k in META_KEYS if k not in meta]
        if missing:
            raise TraceError(f"trace file '{path}' lacks metadata {missing}; {fix}")
        if meta["format_version"] != TRACE_FORMAT_VERSION:
            raise TraceError(
                f"trace file '{path}' has format version {meta['format_version']}, this specrl "
                f"reads version {TRACE_FORMAT_VERSION}; {fix}"
            )
        stored = stored_drafters(meta)
        unknown = [d for d in stored if d not in ("draft-mid", "draft-int8", "draft-int4", LOOKUP_DRAFTER)]
        if unknown:
            raise TraceError(f"trace file '{path}' names unknown drafters {unknown}; {fix}")
        position_fields = {
            **POSITION_FIELDS,
            **{f"{d}/{name}": spec for d in stored for name, spec in drafter_fields(d).items()},
        }
        schema = {**SEGMENT_FIELDS, **TRACE_FIELDS, **position_fields}
        for name, (kind, ndim) in schema.items():
            array = contents.get(name)
            if array is None:
                raise TraceError(f"trace file '{path}' has no field '{name}'; {fix}")
            if array.dtype.kind != kind or array.ndim != ndim:
                raise TraceError(
                    f"trace file '{path}': field '{name}' has dtype {array.dtype} and {array.ndim} "
                    f"dimension(s), expected kind '{kind}' with {ndim}; {fix}"
                )
        n_positions = len(contents["tokens"])
        for name, (_, ndim) in position_fields.items():
            expected = (n_positions, int(meta["k_max"])) if ndim == 2 else (n_positions,)
            if contents[name].shape != expected:
                raise TraceError(
                    f"trace file '{path}': field '{name}' has shape {contents[name].shape}, "
                    f"expected {expected}; {fix}"
                )
        stored_end = contents["segment_offset"] + contents["segment_stored"]
        if len(stored_end) and stored_end.max() > n_positions:
            raise TraceError(f"trace file '{path}': segments point past the stored positions; {fix}")
        return cls(contents, meta, source=str(path))


def _column(per_segment: list[list], kind: str, ndim: int, k_max: int) -> np.ndarray:
    """One position field of every segment, concatenated (typed even when empty)."""
    rows = [v for values in per_segment for v in values]
    dtype = np.int64 if kind == "i" else np.float32
    return np.array(rows, dtype=dtype) if rows else np.zeros((0, k_max) if ndim == 2 else (0,), dtype=dtype)


def _joined(traces: TraceSet) -> tuple:
    """What trace sets must share to be joined."""
    meta = traces.meta
    return meta["pair"], meta["k_max"], meta["sampling"], meta["context_window"], traces.drafters
