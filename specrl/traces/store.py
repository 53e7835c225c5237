"""Where a scenario's traces are kept: file names, folders, and load-or-collect.

Below the envs (docs/design.md section 1): the collector that records missing traces is passed in
(:func:`specrl.envs.recording.cached_traces` passes the real loop's), so nothing here imports
an env.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

from specrl.features import FEATURE_DRAFTERS
from specrl.models import EMBEDDED_PREFIX, ModelPair
from specrl.traces.format import (
    DEFAULT_DRAFTERS,
    TRACE_FORMAT_VERSION,
    TraceError,
    TraceSet,
    analysed_drafters,
)


class Collector(Protocol):
    """Records a scenario's traces: :func:`specrl.envs.recording.collect_traces`."""

    def __call__(
        self,
        pair: ModelPair,
        scenario: Any,
        split: str,
        *,
        prompts_per_domain: int | None,
        seed: int,
        progress: bool,
    ) -> TraceSet: ...


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
    return keep[-40:] + "-" + hashlib.sha256(text.encode()).hexdigest()[:8] if len(keep) > 40 else keep


# Prompts per domain recorded by default: enough variety to train on, few enough that the
# first run collects them in minutes on a CPU (a trace of the small pair takes seconds).
# Validation selects checkpoints and tunes; test is reported (docs/design.md section 4b).
DEFAULT_PROMPTS_PER_DOMAIN = {"train": 24, "validation": 8, "test": 8}


def cache_key(scenario: Any, split: str, prompts_per_domain: int | None, seed: int) -> str:
    """File stem of a scenario's traces: everything that changes them is in the hash, a prompts
    file's contents and the keys that split it included (editing the file records its traces
    again). Without a domain shift the stem is named after the domain, so scenarios that share a
    domain and settings (``code`` and ``mixed``) share its traces."""
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
    if scenario.prompts.file:  # files of the embedded pairs' prompts keep their names
        facts["prompts_digest"] = scenario.prompts.file_digest()
    drafters = analysed_drafters(getattr(scenario, "drafters", DEFAULT_DRAFTERS))
    if drafters != list(DEFAULT_DRAFTERS):  # files of the draft alone keep their names
        facts["drafters"] = drafters
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:12]
    stem = scenario.name if scenario.shift else "+".join(facts["domains"])
    return f"{stem}__{split}__{digest}"


def trace_dirs(pair: ModelPair) -> list[Path]:
    """Where a pair's traces are looked for: shipped with an embedded pair, then the cache."""
    from specrl.embedded.build import shipped_dir
    from specrl.home import specrl_home

    dirs = []
    if pair.name.startswith(EMBEDDED_PREFIX):
        dirs.append(shipped_dir(pair.name.removeprefix(EMBEDDED_PREFIX)) / "traces")
    dirs.append(specrl_home() / "traces" / _slug(pair.name))
    return dirs


def cache_parts(scenario: Any) -> list[Any]:
    """The scenarios whose trace files make up ``scenario``'s: itself, or, for several domains
    without a shift, one single-domain scenario per domain (so ``mixed`` reuses ``code``'s)."""
    domains = [d for d, w in scenario.prompts.domains.items() if w > 0]
    if scenario.shift or len(domains) == 1:
        return [scenario]
    return [replace(scenario, name=d, prompts=replace(scenario.prompts, domains={d: 1.0})) for d in domains]


def pool_names(scenario: Any, split: str, prompts_per_domain: int | None, seed: int) -> list[str]:
    """The file of the whole drafter pool's traces, which replay any of its drafters, for a
    scenario of some of them (``drafters: [ngram]`` replays the ``*_pool`` scenarios' traces); none
    for a scenario of the draft alone or of the whole pool."""
    drafters = set(getattr(scenario, "drafters", DEFAULT_DRAFTERS))
    if drafters <= set(DEFAULT_DRAFTERS) or drafters >= set(FEATURE_DRAFTERS):
        return []
    pool = replace(scenario, drafters=FEATURE_DRAFTERS)
    return [cache_key(pool, split, prompts_per_domain, seed) + ".npz"]


def load_or_collect(
    scenario: Any,
    split: str,
    pair: ModelPair,
    collect: Collector,
    *,
    prompts_per_domain: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> TraceSet:
    """The scenario's traces for ``split``: loaded if shipped or cached, else made by ``collect``
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
                load_or_collect(
                    part,
                    split,
                    pair,
                    collect,
                    prompts_per_domain=prompts_per_domain,
                    seed=seed,
                    progress=progress,
                )
                for part in parts
            ]
        )
    name = cache_key(scenario, split, prompts_per_domain, seed) + ".npz"
    for candidate in [name, *pool_names(scenario, split, prompts_per_domain, seed)]:
        for folder in trace_dirs(pair):
            if (folder / candidate).is_file():
                traces = TraceSet.load(folder / candidate)
                if traces.meta["pair"] != pair.name:
                    raise TraceError(
                        f"trace file '{folder / candidate}' was recorded with pair {traces.meta['pair']!r}, "
                        f"not {pair.name!r}; delete it to collect again"
                    )
                return traces
    traces = collect(
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
    missing = [d for d in scenario.drafters if d not in traces.drafters]
    if missing:
        raise TraceError(
            f"traces from {traces.source} replay the drafters {list(traces.drafters)}, but scenario "
            f"'{scenario.name}' offers {missing} too; collect traces for this scenario"
        )
    for key, value in expected.items():
        if traces.meta[key] != value:
            raise TraceError(
                f"traces from {traces.source} have {key}={traces.meta[key]!r} but scenario "
                f"'{scenario.name}' has {value!r}; collect traces for this scenario"
            )
    return traces
