"""Recording acceptance traces: episodes of the real loop (:class:`~specrl.envs.spec_decode.SpecDecodeEnv`),
decoded plainly and analysed; and :func:`cached_traces`, a scenario's traces loaded from their
store or recorded now."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specrl.engine.types import Action
from specrl.envs.scenario import PairInfo, Scenario, SetupError, loaded_pair
from specrl.envs.spec_decode import SpecDecodeEnv
from specrl.envs.trace_store import (
    DEFAULT_PROMPTS_PER_DOMAIN,
    cache_key,
    cache_parts,
    pool_names,
    sampling_facts,
    stored_traces,
    trace_dirs,
)
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.traces.analysis import analyse_segment, extend_past_eos
from specrl.traces.format import Segment, Trace, TraceError, TraceSet, make_fields


def record_episode(
    env: SpecDecodeEnv, seed: int, options: dict[str, Any], generator: torch.Generator
) -> Trace:
    """Decode one episode of ``env`` plainly (k = 0) and analyse each of its segments."""
    _, info = env.reset(seed=seed, options=options)
    segments, done = [], False
    while not done:
        generation = env.generation
        prompt_ids = generation.tokens[0][: generation.prompt_lengths[0]]
        while env.generation is generation and not done:
            _, _, done, _, _ = env.step(Action(0))
        segments.append(
            analysed_segment(
                env.scenario,
                env.pair,
                prompt_ids,
                generation.output_ids(0),
                (generation.max_new_tokens, generation.finished_by_eos[0]),
                seed + len(segments),
                generator,
            )
        )
    return Trace(domain=info["domain"], prompt_index=info["prompt_index"], seed=seed, segments=segments)


def analysed_segment(
    scenario: Scenario,
    pair: ModelPair,
    prompt_ids: list[int],
    trajectory: list[int],
    ending: tuple[int, bool],
    seed: int,
    generator: torch.Generator,
) -> Segment:
    """The segment of ``trajectory`` decoded after ``prompt_ids`` (``ending``: its budget, and
    whether an EOS ended it, when the trajectory runs ``k_max`` tokens further, drawn with
    ``seed``), analysed teacher-forced for the scenario's drafters (:func:`analyse_segment`)."""
    budget, eos = ending
    sampling, k_max = scenario.sampling, scenario.k_max
    stored = list(trajectory)
    if eos:
        stored += extend_past_eos(pair, sampling, prompt_ids + trajectory, k_max, seed)
    fields = analyse_segment(pair, sampling, prompt_ids, stored, k_max, generator, scenario.drafters)
    others = fields.pop("drafters", {})
    return Segment(
        prompt_length=len(prompt_ids),
        budget=budget,
        end=len(trajectory),
        eos=eos,
        **fields,
        others={name: make_fields(name, values) for name, values in others.items()},
    )


@dataclass(frozen=True)
class TraceJob:
    """One prompt to record: episode ``index`` of the collection, reset with ``seed``, its sampled
    draws (teacher-forced analysis) from a generator seeded ``seed`` too. Every job is
    independent of the others, so a collection can be split across processes (Ray workers,
    :mod:`specrl.distributed`) and give the same traces."""

    index: int
    domain: str
    prompt_index: int
    seed: int

    def describe(self) -> str:
        return f"{self.domain}#{self.prompt_index}"


def trace_jobs(
    scenario: Scenario, prompt_sets: dict[str, list[str]], prompts_per_domain: int | None, seed: int
) -> list[TraceJob]:
    """Every prompt (or the first ``prompts_per_domain``) of each start domain, in order; job i is
    reset with seed ``seed + i`` (the evaluation's episode plan uses the same rule)."""
    pairs = [
        (domain, index)
        for domain in scenario.prompts.domains
        if scenario.prompts.domains[domain] > 0
        for index in range(min(prompts_per_domain or 10**9, len(prompt_sets[domain])))
    ]
    return [TraceJob(i, domain, index, seed + i) for i, (domain, index) in enumerate(pairs)]


def recording_env(pair: ModelPair, scenario: Scenario, split: str) -> SpecDecodeEnv:
    """The env traces are recorded in: ``split``'s prompts, modeled time (nothing is timed)."""
    scenario = scenario.with_overrides(split=split, time="modeled")
    return SpecDecodeEnv(scenario, pair=pair, latency=LatencyModel.from_cost_model(scenario.cost_model))


def record_jobs(env: SpecDecodeEnv, jobs: Sequence[TraceJob], progress: bool = False) -> list[Trace]:
    """The trace of each job, in order."""
    from tqdm.auto import tqdm  # ~0.1 s to import (asyncio); only recording needs it

    traces = []
    desc = f"traces {env.scenario.name}/{env.scenario.prompts.split}"
    for job in tqdm(jobs, desc=desc, disable=not progress):
        generator = torch.Generator(device=env.pair.device).manual_seed(job.seed)
        options = {"domain": job.domain, "prompt_index": job.prompt_index}
        traces.append(record_episode(env, job.seed, options, generator))
    return traces


def trace_meta(pair: ModelPair, scenario: Scenario, split: str, prompts_per_domain, seed) -> dict:
    """What a recorded :class:`TraceSet` says about itself."""
    return {
        "pair": pair.name,
        "scenario": scenario.name,
        "split": split,
        "k_max": scenario.k_max,
        "sampling": sampling_facts(scenario),
        "context_window": pair.context_length,
        "vocab_size": pair.vocab_size,
        "max_new_tokens": scenario.max_new_tokens,
        "stop_at_eos": scenario.stop_at_eos,
        "shift": [[s.after_tokens, s.domain] for s in scenario.shift],
        "drafters": list(scenario.drafters),
        "seed": seed,
        "prompts_per_domain": prompts_per_domain,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def collect_traces(
    pair: ModelPair,
    scenario: Scenario,
    split: str = "test",
    *,
    prompts_per_domain: int | None = None,
    seed: int = 0,
    progress: bool = True,
) -> TraceSet:
    """Record a trace for every prompt (or the first ``prompts_per_domain``) of each of the
    scenario's start domains in ``split`` (:func:`trace_jobs`). Episode i's reset seed is
    ``seed + i``, so the real env reset with the same seed and options decodes the same episode."""
    env = recording_env(pair, scenario, split)
    jobs = trace_jobs(env.scenario, env.prompt_sets, prompts_per_domain, seed)
    traces = record_jobs(env, jobs, progress)
    return TraceSet.from_traces(traces, trace_meta(pair, env.scenario, split, prompts_per_domain, seed))


# Records a scenario's traces, called as collect_traces is: (pair, scenario, split, *,
# prompts_per_domain, seed, progress).
Collect = Callable[..., TraceSet]
_collectors: list[Collect] = []  # the innermost recording_with's


@contextmanager
def recording_with(collect: Collect) -> Iterator[None]:
    """Inside the block, :func:`cached_traces` records missing traces with ``collect`` (e.g.
    :meth:`specrl.distributed.RayPool.collector`) unless it is given one."""
    _collectors.append(collect)
    try:
        yield
    finally:
        _collectors.pop()


def engine_option(scenario: Scenario) -> str:
    """What ``specrl collect`` needs besides the scenario to record its traces with its engine."""
    return "" if scenario.recorded_by == "specrl" else f" --engine {scenario.recorded_by}"


def cached_traces(
    scenario: Scenario,
    split: str,
    pair: ModelPair | PairInfo,
    *,
    prompts_per_domain: int | None = None,
    seed: int = 0,
    progress: bool = True,
    collect: Collect | None = None,
    record: bool = True,
) -> TraceSet:
    """The scenario's traces for ``split``: loaded if shipped or cached
    (:mod:`specrl.envs.trace_store`), else recorded now (``record``, with progress) and cached under
    ``$SPECRL_HOME/traces``; a scenario ``recorded_by`` another engine only with a ``collect`` of it.
    A scenario of several domains without a shift joins the traces of each
    domain. ``prompts_per_domain`` defaults to ``DEFAULT_PROMPTS_PER_DOMAIN[split]``. Recording uses
    ``collect``, else :func:`recording_with`'s, else this process's :func:`collect_traces` (a
    :class:`~specrl.envs.scenario.PairInfo`, no weights loaded, is loaded only to record, and a
    line on stderr says so); :meth:`specrl.distributed.RayPool.collector` records on Ray workers.

    Raises:
        TraceError: an unknown split.
        SetupError: none shipped or cached and ``record`` is False; the message names the command
            that records them.
    """
    if split not in DEFAULT_PROMPTS_PER_DOMAIN:
        raise TraceError(f"unknown prompt split {split!r}: use one of {sorted(DEFAULT_PROMPTS_PER_DOMAIN)}")
    n = DEFAULT_PROMPTS_PER_DOMAIN[split] if prompts_per_domain is None else prompts_per_domain
    options = {"prompts_per_domain": n, "seed": seed, "progress": progress}
    parts = cache_parts(scenario)
    if parts != [scenario]:
        return TraceSet.concatenate(
            [cached_traces(part, split, pair, **options, collect=collect, record=record) for part in parts]
        )
    name = cache_key(scenario, split, n, seed) + ".npz"
    traces = stored_traces([name, *pool_names(scenario, split, n, seed)], pair)
    if traces is not None:
        return traces
    collect = collect or (_collectors[-1] if _collectors else None)
    if not record or (collect is None and scenario.recorded_by != "specrl"):
        where = scenario.source if scenario.source and Path(scenario.source).is_file() else scenario.name
        raise SetupError(
            f"no '{split}' traces of scenario '{scenario.name}' for pair '{pair.name}' are shipped or "
            f"cached (looked in {', '.join(str(d) for d in trace_dirs(pair))}): record them with "
            f"`specrl collect --scenarios {where} --split {split}{engine_option(scenario)}`, or pass "
            "prepare=True to the env to record them now"
        )
    if collect is None:
        why = f"record the '{split}' traces of scenario '{scenario.name}' (none shipped or cached)"
        traces = collect_traces(loaded_pair(pair, why), scenario, split, **options)
    else:
        traces = collect(pair, scenario, split, **options)
    traces.save(trace_dirs(pair)[-1] / name)
    return traces
