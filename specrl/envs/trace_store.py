"""Where a scenario's traces are kept: shipped with an embedded pair or cached under
``$SPECRL_HOME/traces``, one ``.npz`` file per scenario part and split, named by everything that
changes them; and the check that a trace set fits a scenario. :func:`specrl.envs.recording.cached_traces`
loads them from here or records them."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

from specrl.envs.scenario import PairInfo, Scenario
from specrl.features import FEATURE_DRAFTERS
from specrl.models import EMBEDDED_PREFIX, ModelPair
from specrl.traces.format import (
    DEFAULT_DRAFTERS,
    TRACE_FORMAT_VERSION,
    TraceError,
    TraceSet,
    analysed_drafters,
)

# Prompts per domain recorded by default: enough variety to train on, few enough that the
# first run collects them in minutes on a CPU. Validation selects checkpoints and tunes; test is
# reported (docs/design.md section 4b).
DEFAULT_PROMPTS_PER_DOMAIN = {"train": 24, "validation": 8, "test": 8}


def _slug(text: str) -> str:
    keep = "".join(c if c.isalnum() or c in "-_." else "_" for c in text)
    return keep[-40:] + "-" + hashlib.sha256(text.encode()).hexdigest()[:8] if len(keep) > 40 else keep


def sampling_facts(scenario: Scenario) -> dict[str, float | int | None]:
    """The sampling settings a trace set records and must match."""
    return {
        "temperature": scenario.sampling.temperature,
        "top_k": scenario.sampling.top_k,
        "top_p": scenario.sampling.top_p,
    }


def cache_key(scenario: Scenario, split: str, prompts_per_domain: int | None, seed: int) -> str:
    """File stem of a scenario's traces: everything that changes them is in the hash, a prompts
    file's contents and the keys that split it included (editing the file records its traces
    again). Without a domain shift the stem is named after the domain, so scenarios that share a
    domain and settings (``code`` and ``mixed``) share its traces."""
    facts = {
        "domains": sorted(d for d, w in scenario.prompts.domains.items() if w > 0),
        "prompts_file": scenario.prompts.file,
        "sampling": list(sampling_facts(scenario).values()),
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
    if scenario.prompts.chat:
        facts["chat"] = True
    if scenario.recorded_by != "specrl":  # files of specrl's engine keep their names
        facts["recorded_by"] = scenario.recorded_by
    drafters = analysed_drafters(scenario.drafters)
    if drafters != list(DEFAULT_DRAFTERS):  # files of the draft alone keep their names
        facts["drafters"] = drafters
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:12]
    stem = scenario.name if scenario.shift else "+".join(facts["domains"])
    return f"{stem}__{split}__{digest}"


def trace_dirs(pair: ModelPair | PairInfo) -> list[Path]:
    """Where a pair's traces are looked for: shipped with an embedded pair, then the cache."""
    from specrl.embedded.build import shipped_dir
    from specrl.home import specrl_home

    dirs = []
    if pair.name.startswith(EMBEDDED_PREFIX):
        dirs.append(shipped_dir(pair.name.removeprefix(EMBEDDED_PREFIX)) / "traces")
    dirs.append(specrl_home() / "traces" / _slug(pair.name))
    return dirs


def cache_parts(scenario: Scenario) -> list[Scenario]:
    """The scenarios whose trace files make up ``scenario``'s: itself, or, for several domains
    without a shift, one single-domain scenario per domain (so ``mixed`` reuses ``code``'s)."""
    domains = [d for d, w in scenario.prompts.domains.items() if w > 0]
    if scenario.shift or len(domains) == 1:
        return [scenario]
    return [replace(scenario, name=d, prompts=replace(scenario.prompts, domains={d: 1.0})) for d in domains]


def pool_names(scenario: Scenario, split: str, prompts_per_domain: int | None, seed: int) -> list[str]:
    """The file of the whole drafter pool's traces, which replay any of its drafters, for a
    scenario of some of them (``drafters: [ngram]`` replays the ``*_pool`` scenarios' traces); none
    for a scenario of the draft alone or of the whole pool."""
    drafters = set(scenario.drafters)
    if drafters <= set(DEFAULT_DRAFTERS) or drafters >= set(FEATURE_DRAFTERS):
        return []
    pool = replace(scenario, drafters=FEATURE_DRAFTERS)
    return [cache_key(pool, split, prompts_per_domain, seed) + ".npz"]


def stored_traces(names: list[str], pair: ModelPair | PairInfo) -> TraceSet | None:
    """The first of the files ``names`` in the pair's folders (:func:`trace_dirs`), or None."""
    for name in names:
        for folder in trace_dirs(pair):
            if (folder / name).is_file():
                traces = TraceSet.load(folder / name)
                if traces.meta["pair"] != pair.name:
                    raise TraceError(
                        f"trace file '{folder / name}' was recorded with pair {traces.meta['pair']!r}, "
                        f"not {pair.name!r}; delete it to collect again"
                    )
                return traces
    return None


def with_scenario(traces: TraceSet, scenario: Scenario) -> TraceSet:
    """Check that ``traces`` fit ``scenario`` (drafters, sampling, k_max, budget); a TraceError
    says what differs."""
    missing = [d for d in scenario.drafters if d not in traces.drafters]
    if missing:
        raise TraceError(
            f"traces from {traces.source} replay the drafters {list(traces.drafters)}, but scenario "
            f"'{scenario.name}' offers {missing} too; collect traces for this scenario"
        )
    expected = {
        "k_max": scenario.k_max,
        "sampling": sampling_facts(scenario),
        "max_new_tokens": scenario.max_new_tokens,
    }
    for key, value in expected.items():
        if traces.meta[key] != value:
            raise TraceError(
                f"traces from {traces.source} have {key}={traces.meta[key]!r} but scenario "
                f"'{scenario.name}' has {value!r}; collect traces for this scenario"
            )
    return traces
