"""Acceptance traces: what the trace-replay simulator needs to replay the real loop exactly.

A trace is one episode of a scenario decoded plainly by the target (greedy or sampled, as
the scenario says), plus one teacher-forced forward of each model over it (DESIGN.md
section 4). For every generated position j of a segment (context = prompt + y_<j):

- ``confidence[j]``, ``entropy[j]``: max_v q_j(v) and the entropy of q_j, the draft's
  distribution after the scenario's sampling processing.
- ``accept_prob[j]``: P(a draft proposal at j is accepted | the target emits y_j). Greedy:
  1 if argmax q_j == y_j else 0. Sampled: min(1, q_j(y_j) / p_j(y_j)), because
  P(accept, Y = y) = min(p(y), q(y)) and P(Y = y) = p(y).
- ``accepted_ap[j]``: the engine's ``acceptance_probs`` entry of an accepted proposal y_j,
  min(1, p_j(y_j) / q_j(y_j)) (greedy: 1).
- the draft's own continuation past a rejection at j (``off_*[j, i]``, i = 0..k_max - 1):
  the rejected proposal x_j (greedy: argmax q_j; sampled: a draw from
  norm(max(0, q_j - p_j)), its law given rejection), then the draft's next k_max - 1
  proposals on that wrong context. ``off_confidence``/``off_entropy`` at i >= 1 are the
  draft's distributions there, ``off_ap[j, i]`` the engine's acceptance_probs entry of the
  proposal (the target is run over the continuation too). Column 0 of the confidences
  repeats the on-trajectory value. Rows of positions where a rejection cannot happen are 0.

So for greedy decoding the replay reproduces the real loop's accepted counts, proposals,
confidences and features exactly; for sampling, it reproduces the acceptance process in
distribution (a rejection's continuation is one stored draw, not a fresh one per replay).

A segment ends at its token budget or at EOS; after an EOS the trajectory runs k_max tokens
further (``stored`` > ``end``), because the engine drafts past an EOS it has not seen yet.

Files are ``.npz`` archives with a format version and a schema check on load
(``TraceError`` names the file, the problem and the fix).
"""

from __future__ import annotations

import hashlib
import io
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
import torch

from specrl.engine.cache import CachedModel
from specrl.engine.generation import Generation
from specrl.engine.sampling import SamplingConfig, entropy
from specrl.engine.types import Action
from specrl.models import ModelPair

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


@dataclass
class Segment:
    """One segment of a trace (an episode has one, or one per domain shift), as Python lists
    for fast scalar replay. Position j generates token j of the segment."""

    prompt_length: int  # context length when the segment starts
    budget: int  # the engine generation's max_new_tokens
    end: int  # tokens the segment emits (EOS included)
    eos: bool  # ended by EOS (else by its budget or the context window)
    tokens: list[int]
    confidence: list[float]
    entropy: list[float]
    accept_prob: list[float]
    accepted_ap: list[float]
    off_confidence: list[list[float]]
    off_entropy: list[list[float]]
    off_ap: list[list[float]]


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
        for name, (_, ndim) in POSITION_FIELDS.items():
            rows = [v for s in segments for v in getattr(s, name)]
            shape = (0, k_max) if ndim == 2 else (0,)
            dtype = np.int64 if name == "tokens" else np.float32
            arrays[name] = np.array(rows, dtype=dtype) if rows else np.zeros(shape, dtype=dtype)
        for name in ("segment_trace", "segment_offset", "trace_first_segment"):
            arrays[name] = arrays[name].reshape(-1)
        return cls(arrays, {**meta, "format_version": TRACE_FORMAT_VERSION})

    @classmethod
    def concatenate(cls, sets: Sequence[TraceSet]) -> TraceSet:
        """One set holding the traces of several (same pair, sampling and k_max)."""
        if not sets:
            raise ValueError("nothing to concatenate")
        for other in sets[1:]:
            for key in ("pair", "k_max", "sampling", "context_window"):
                if other.meta[key] != sets[0].meta[key]:
                    raise TraceError(
                        f"cannot join trace sets with different {key}: {sets[0].meta[key]!r} "
                        f"({sets[0].source}) vs {other.meta[key]!r} ({other.source})"
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
        fix = "collect it again: python experiments/collect_traces.py (or delete the file to rebuild it)"
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
        schema = {**SEGMENT_FIELDS, **TRACE_FIELDS, **POSITION_FIELDS}
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
        for name, (_, ndim) in POSITION_FIELDS.items():
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


# ---- collection ------------------------------------------------------------------------


def analyse_segment(
    pair: ModelPair,
    sampling: SamplingConfig,
    prompt_ids: list[int],
    trajectory: list[int],
    k_max: int,
    generator: torch.Generator,
) -> dict[str, list]:
    """Teacher-forced statistics of ``trajectory`` after ``prompt_ids`` (see the module doc).

    Both models run once over the whole sequence; then, for every position where a rejection
    can happen, the draft continues from its rejected proposal and the target verifies that
    continuation. The caches are cut back between positions, never recomputed.
    """
    length, n = len(prompt_ids), len(trajectory)
    sequence = prompt_ids + trajectory
    ids = torch.tensor([sequence], dtype=torch.long, device=pair.device)
    target, draft = CachedModel(pair.target, pair.vocab_size), CachedModel(pair.draft, pair.vocab_size)
    p = sampling.probs(target.feed(ids[:, : length + n - 1], keep=n))[0]  # (n, V): p[j] predicts y_j
    q = sampling.probs(draft.feed(ids[:, : length + n - 1], keep=n))[0]  # (n, V)
    y = ids[0, length:]
    confidence, entropies = q.max(-1).values, entropy(q)
    if sampling.greedy:
        accept_prob = (q.argmax(-1) == y).float()
        accepted_ap = torch.ones(n)
    else:
        p_y, q_y = p.gather(-1, y[:, None])[:, 0], q.gather(-1, y[:, None])[:, 0]
        accept_prob = (q_y / p_y).clamp(max=1.0)
        accepted_ap = torch.where(q_y > 0, (p_y / q_y.clamp_min(1e-30)).clamp(max=1.0), torch.ones_like(q_y))
    off_confidence, off_entropy, off_ap = (torch.zeros(n, k_max) for _ in range(3))
    off_confidence[:, 0], off_entropy[:, 0] = confidence, entropies
    rejectable = (accept_prob < 1.0).nonzero()[:, 0].tolist()
    # Both caches hold the true sequence up to ``valid`` tokens (then earlier continuations).
    draft_valid = target_valid = length + n - 1
    for j in rejectable:
        # The rejected proposal at j: its law given rejection.
        if sampling.greedy:
            x = [int(q[j].argmax())]
            off_ap[j, 0] = float(x[0] == int(p[j].argmax()))
        else:
            x = [int(torch.multinomial((q[j] - p[j]).clamp(min=0), 1, generator=generator))]
            off_ap[j, 0] = min(1.0, float(p[j, x[0]] / q[j, x[0]]))
        room = pair.context_length - (length + j) - 1  # the engine never drafts past the window
        steps = max(0, min(k_max - 1, room))
        if not steps:
            continue
        draft.rollback(min(draft_valid, length + j))
        draft_valid = length + j
        pending = ids[:, draft.length : length + j]
        q_off = []
        for _ in range(steps):
            step_input = torch.cat([pending, torch.tensor([[x[-1]]], device=ids.device)], 1)
            q_off.append(sampling.probs(draft.feed(step_input)[0, -1]))
            x.append(int(sampling.choose(q_off[-1][None], generator)[0]))
            pending = ids[:, :0]
        target.rollback(min(target_valid, length + j))
        target_valid = length + j
        verify_input = torch.cat(
            [ids[:, target.length : length + j], torch.tensor([x[:steps]], device=ids.device)], 1
        )
        p_off = sampling.probs(target.feed(verify_input, keep=steps))[0]  # (steps, V)
        for i in range(1, steps + 1):
            q_i, p_i, x_i = q_off[i - 1], p_off[i - 1], x[i]
            off_confidence[j, i] = q_i.max()
            off_entropy[j, i] = entropy(q_i)
            if sampling.greedy:
                off_ap[j, i] = float(x_i == int(p_i.argmax()))
            else:
                off_ap[j, i] = min(1.0, float(p_i[x_i] / q_i[x_i]))
    return {
        "tokens": trajectory,
        "confidence": confidence.tolist(),
        "entropy": entropies.tolist(),
        "accept_prob": accept_prob.tolist(),
        "accepted_ap": accepted_ap.tolist(),
        "off_confidence": off_confidence.tolist(),
        "off_entropy": off_entropy.tolist(),
        "off_ap": off_ap.tolist(),
    }


def _extend_past_eos(
    pair: ModelPair, sampling: SamplingConfig, context: list[int], k_max: int, seed: int
) -> list[int]:
    """k_max more target tokens after an EOS (the engine may draft past an EOS it has not seen)."""
    room = pair.context_length - len(context)
    if room <= 0:
        return []
    generation = Generation(pair, context, min(k_max, room), sampling, seed, stop_at_eos=False)
    while not generation.done:
        generation.step(Action(0))
    return generation.output_ids


def record_episode(env: Any, seed: int, options: dict[str, Any], generator: torch.Generator) -> Trace:
    """Decode one episode of a :class:`~specrl.envs.SpecDecodeEnv` plainly and analyse it."""
    _, info = env.reset(seed=seed, options=options)
    pair, sampling, k_max = env.pair, env.scenario.sampling, env.scenario.k_max
    segments, done = [], False
    while not done:
        generation = env.generation
        prompt_ids = generation.tokens[0].tolist()
        while env.generation is generation and not done:
            _, _, done, _, _ = env.step(Action(0))
        trajectory = generation.output_ids
        stored = list(trajectory)
        if generation.finished_by_eos:
            stored += _extend_past_eos(pair, sampling, prompt_ids + trajectory, k_max, seed + len(segments))
        fields = analyse_segment(pair, sampling, prompt_ids, stored, k_max, generator)
        segments.append(
            Segment(
                prompt_length=len(prompt_ids),
                budget=generation.max_new_tokens,
                end=len(trajectory),
                eos=generation.finished_by_eos,
                **fields,
            )
        )
    return Trace(domain=info["domain"], prompt_index=info["prompt_index"], seed=seed, segments=segments)


def collect_traces(
    pair: ModelPair,
    scenario: Any,
    split: str = "test",
    *,
    prompts_per_domain: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> TraceSet:
    """Record a trace for every prompt (or the first ``prompts_per_domain``) of each of the
    scenario's start domains in ``split``. Episode i's reset seed is ``seed + i``, so the real
    env reset with the same seed and options decodes the same episode."""
    from tqdm.auto import tqdm

    from specrl.envs.spec_decode import SpecDecodeEnv
    from specrl.latency import LatencyModel

    scenario = scenario.with_overrides(split=split, time="modeled")
    env = SpecDecodeEnv(scenario, pair=pair, latency=LatencyModel.from_cost_model(scenario.cost_model))
    jobs = [
        (domain, index)
        for domain in scenario.prompts.domains
        if scenario.prompts.domains[domain] > 0
        for index in range(min(prompts_per_domain or 10**9, len(env.prompt_sets[domain])))
    ]
    generator = torch.Generator(device=pair.device).manual_seed(seed)
    traces = []
    for i, (domain, index) in enumerate(
        tqdm(jobs, desc=f"traces {scenario.name}/{split}", disable=not progress)
    ):
        traces.append(record_episode(env, seed + i, {"domain": domain, "prompt_index": index}, generator))
    meta = {
        "pair": pair.name,
        "scenario": scenario.name,
        "split": split,
        "k_max": scenario.k_max,
        "sampling": {
            "temperature": scenario.sampling.temperature,
            "top_k": scenario.sampling.top_k,
            "top_p": scenario.sampling.top_p,
        },
        "context_window": pair.context_length,
        "vocab_size": pair.vocab_size,
        "max_new_tokens": scenario.max_new_tokens,
        "stop_at_eos": scenario.stop_at_eos,
        "shift": [[s.after_tokens, s.domain] for s in scenario.shift],
        "seed": seed,
        "prompts_per_domain": prompts_per_domain,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    return TraceSet.from_traces(traces, meta)


# ---- the cache ----------------------------------------------------------------------------


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
    return keep[-40:] + "-" + hashlib.sha256(text.encode()).hexdigest()[:8] if len(keep) > 40 else keep


# Prompts per domain recorded by default: enough variety to train on, few enough that the
# first run collects them in minutes on a CPU (a trace of the small pair takes seconds).
# Validation selects checkpoints and tunes; test is reported (DESIGN.md section 4b).
DEFAULT_PROMPTS_PER_DOMAIN = {"train": 24, "validation": 8, "test": 8}


def cache_key(scenario: Any, split: str, prompts_per_domain: int | None, seed: int) -> str:
    """File stem of a scenario's traces: everything that changes them is in the hash. Without
    a domain shift the stem is named after the domain, so scenarios that share a domain and
    settings (``code`` and ``mixed``) share its traces."""
    facts = {
        "domains": sorted(d for d, w in scenario.prompts.domains.items() if w > 0),
        "prompts_file": scenario.prompts.file,
        "sampling": [scenario.sampling.temperature, scenario.sampling.top_k, scenario.sampling.top_p],
        "max_new_tokens": scenario.max_new_tokens,
        "stop_at_eos": scenario.stop_at_eos,
        "k_max": scenario.k_max,
        "shift": [[s.after_tokens, s.domain] for s in scenario.shift],
        "n": prompts_per_domain,
        "seed": seed,
        "version": TRACE_FORMAT_VERSION,
    }
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:12]
    stem = scenario.name if scenario.shift else "+".join(facts["domains"])
    return f"{stem}__{split}__{digest}"


def trace_dirs(pair: ModelPair) -> list[Path]:
    """Where a pair's traces are looked for: shipped with an embedded pair, then the cache."""
    from specrl.zoo.build import shipped_dir, specrl_home

    dirs = []
    if pair.name.startswith("specrl-zoo-"):
        dirs.append(shipped_dir(pair.name.removeprefix("specrl-zoo-")) / "traces")
    dirs.append(specrl_home() / "traces" / _slug(pair.name))
    return dirs


def cache_parts(scenario: Any) -> list[Any]:
    """The scenarios whose trace files make up ``scenario``'s: itself, or, for several domains
    without a shift, one single-domain scenario per domain (so ``mixed`` reuses ``code``'s)."""
    domains = [d for d, w in scenario.prompts.domains.items() if w > 0]
    if scenario.shift or len(domains) == 1:
        return [scenario]
    return [replace(scenario, name=d, prompts=replace(scenario.prompts, domains={d: 1.0})) for d in domains]


def cached_traces(
    scenario: Any,
    split: str,
    pair: ModelPair,
    *,
    prompts_per_domain: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> TraceSet:
    """The scenario's traces for ``split``: loaded if shipped or cached, else collected now
    (with progress) and cached under ``$SPECRL_HOME/traces``. ``prompts_per_domain`` defaults
    to ``DEFAULT_PROMPTS_PER_DOMAIN[split]``. A scenario of several domains without a shift
    joins the traces of each domain."""
    if split not in DEFAULT_PROMPTS_PER_DOMAIN:
        raise TraceError(
            f"unknown prompt split {split!r}: use one of {sorted(DEFAULT_PROMPTS_PER_DOMAIN)} "
            "('heldout' became 'validation', for selection, and 'test', for reporting)"
        )
    if prompts_per_domain is None:
        prompts_per_domain = DEFAULT_PROMPTS_PER_DOMAIN[split]
    parts = cache_parts(scenario)
    if parts != [scenario]:
        return TraceSet.concatenate(
            [
                cached_traces(
                    part, split, pair, prompts_per_domain=prompts_per_domain, seed=seed, progress=progress
                )
                for part in parts
            ]
        )
    name = cache_key(scenario, split, prompts_per_domain, seed) + ".npz"
    for folder in trace_dirs(pair):
        if (folder / name).is_file():
            traces = TraceSet.load(folder / name)
            if traces.meta["pair"] != pair.name:
                raise TraceError(
                    f"trace file '{folder / name}' was recorded with pair {traces.meta['pair']!r}, "
                    f"not {pair.name!r}; delete it to collect again"
                )
            return traces
    traces = collect_traces(
        pair, scenario, split, prompts_per_domain=prompts_per_domain, seed=seed, progress=progress
    )
    traces.save(trace_dirs(pair)[-1] / name)
    return traces


def with_scenario(traces: TraceSet, scenario: Any) -> TraceSet:
    """Check that ``traces`` fit ``scenario`` (sampling, k_max, budget); a TraceError says what differs."""
    expected = {
        "k_max": scenario.k_max,
        "sampling": {
            "temperature": scenario.sampling.temperature,
            "top_k": scenario.sampling.top_k,
            "top_p": scenario.sampling.top_p,
        },
        "max_new_tokens": scenario.max_new_tokens,
    }
    for key, value in expected.items():
        if traces.meta[key] != value:
            raise TraceError(
                f"traces from {traces.source} have {key}={traces.meta[key]!r} but scenario "
                f"'{scenario.name}' has {value!r}; collect traces for this scenario"
            )
    return traces


__all__ = [
    "TRACE_FORMAT_VERSION",
    "Segment",
    "Trace",
    "TraceError",
    "TraceSet",
    "analyse_segment",
    "cache_key",
    "cached_traces",
    "collect_traces",
    "record_episode",
    "with_scenario",
]
