"""Recording traces through vLLM (``specrl collect --engine vllm``; issue 53, item 3).

:class:`VLLMCollector` records a scenario's traces as :func:`specrl.envs.recording.collect_traces`
does, but the target decodes inside vLLM: the same jobs (:func:`~specrl.envs.recording.trace_jobs`:
prompts, budgets and seeds, taken by resetting the recording env without decoding) are served
together by one ``vllm.LLM`` (continuous batching, up to ``max_num_seqs`` rows), specrl's proposer
speculating with a controller (default TCP) over the scenario's drafters it runs (the pair's draft
model where the scenario drafts with it, the n-gram lookup otherwise) and recording every step
(:mod:`specrl.vllm.recorder`). Each request's output is then analysed teacher-forced exactly as
:func:`~specrl.envs.recording.record_episode` analyses its own decode
(:func:`~specrl.envs.recording.analysed_segment`), so the traces replay in the trace-replay env.

Beside the traces, the recording folder keeps ``steps.jsonl`` (vLLM's prices:
:func:`~specrl.latency.serving.fit_serving_latency`), ``requests.jsonl`` and ``agreement.json``:
how many recorded steps replay exactly on their traces (:func:`~specrl.vllm.agreement.replay_agreement`),
also in the trace set's ``meta["vllm"]``.

vLLM is imported only when serving (:func:`~specrl.vllm.compat.require_vllm` names the install).
The lookup's n-gram orders are vLLM's ``prompt_lookup_min/max``, left at the proposer's defaults
(1 and 3), which are the analysis' (:class:`~specrl.engine.drafters.ngram.NGramIndex`).
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from specrl.envs.recording import TraceJob, analysed_segment, recording_env, trace_jobs, trace_meta
from specrl.envs.scenario import PairInfo, Scenario, SetupError, loaded_pair
from specrl.envs.spec_decode import SpecDecodeEnv
from specrl.envs.trace_store import cache_key, trace_dirs
from specrl.features import LOOKUP_DRAFTER
from specrl.io import write_text_atomic
from specrl.models import ModelPair
from specrl.traces.format import Trace, TraceSet
from specrl.vllm.agreement import replay_agreement
from specrl.vllm.draft import DRAFT
from specrl.vllm.recorder import REQUESTS_FILE, STEPS_FILE, RecordedRequest, read_requests

AGREEMENT_FILE = "agreement.json"
DEFAULT_MAX_NUM_SEQS = 16


@dataclass(frozen=True)
class ServedPrompt:
    """One job's request: its prompt's token ids and the tokens it may emit."""

    job: TraceJob
    prompt: list[int]
    budget: int


@dataclass(frozen=True)
class ServedOutput:
    """What vLLM emitted for a request, and whether an EOS ended it."""

    tokens: list[int]
    eos: bool


@dataclass(frozen=True)
class VLLMCollector:
    """Records traces through vLLM; called as :func:`~specrl.envs.recording.collect_traces` is (a
    :data:`~specrl.envs.recording.Collect`, for :func:`~specrl.envs.recording.recording_with`).

    Args:
        controller: what the proposer runs (a rule, ``static:K``, a policy; :mod:`specrl.vllm.settings`).
        max_num_seqs: vLLM's most rows in a step.
        folder: where recordings go, one folder per trace file (named by the file's stem); default
            beside the trace cache, ``<stem>.vllm`` next to ``<stem>.npz``.
    """

    controller: str = "tcp"
    max_num_seqs: int = DEFAULT_MAX_NUM_SEQS
    folder: str | Path | None = None

    def __call__(
        self,
        pair: ModelPair | PairInfo,
        scenario: Scenario,
        split: str = "test",
        *,
        prompts_per_domain: int | None = None,
        seed: int = 0,
        progress: bool = True,
    ) -> TraceSet:
        """The scenario's traces for ``split``, decoded by vLLM (the module doc).

        Raises:
            SetupError: a scenario that shifts domain (several segments per episode).
            ImportError: vLLM is missing (the message names the install).
        """
        refuse_shifts(scenario)
        pair = loaded_pair(pair, f"record the '{split}' traces of scenario '{scenario.name}' through vLLM")
        env = recording_env(pair, scenario, split)
        jobs = trace_jobs(env.scenario, env.prompt_sets, prompts_per_domain, seed)
        prompts = served_prompts(env, jobs)
        root = self.folder or trace_dirs(pair)[-1]
        folder = recording_folder(root, env.scenario, split, prompts_per_domain, seed)
        outputs = serve(
            pair, env.scenario, prompts, folder, self.controller, self.max_num_seqs, seed, progress
        )
        traces = analysed(pair, env.scenario, prompts, outputs, progress)
        meta = trace_meta(pair, env.scenario, split, prompts_per_domain, seed)
        trace_set = TraceSet.from_traces(traces, meta)
        agreement = replay_agreement(trace_set, matched_requests(prompts, read_requests(folder)))
        write_text_atomic(folder / AGREEMENT_FILE, json.dumps(agreement, indent=2) + "\n")
        trace_set.meta["vllm"] = {
            "controller": self.controller,
            "max_num_seqs": self.max_num_seqs,
            "recording": str(folder),
            "replay_agreement": {k: v for k, v in agreement.items() if k != "disagreements"},
        }
        return trace_set


def refuse_shifts(scenario: Scenario) -> None:
    """vLLM serves a request as one prompt: a scenario whose episodes shift domain cannot be served."""
    if scenario.shift:
        after = ", ".join(f"{s.domain} after {s.after_tokens} tokens" for s in scenario.shift)
        raise SetupError(
            f"scenario '{scenario.name}' shifts domain within an episode ({after}): vLLM serves each "
            "request as one prompt, so `--engine vllm` records scenarios without `shift:` only; record "
            f"this one with specrl's own engine (specrl collect --scenarios {scenario.name})"
        )


def served_prompts(env: SpecDecodeEnv, jobs: Sequence[TraceJob]) -> list[ServedPrompt]:
    """Each job's prompt and budget, as :func:`~specrl.envs.recording.record_episode` starts it:
    the recording env reset with the job's seed and options, nothing decoded."""
    prompts = []
    for job in jobs:
        env.reset(seed=job.seed, options={"domain": job.domain, "prompt_index": job.prompt_index})
        generation = env.generation
        prompt = list(generation.tokens[0][: generation.prompt_lengths[0]])
        prompts.append(ServedPrompt(job, prompt, generation.max_new_tokens))
    return prompts


def recording_folder(
    root: str | Path, scenario: Scenario, split: str, prompts_per_domain: int | None, seed: int
) -> Path:
    """A fresh folder under ``root`` for one trace file's recording, named after the file
    (:func:`~specrl.envs.trace_store.cache_key`); an older recording there is replaced (the
    recorder appends)."""
    folder = Path(root) / f"{cache_key(scenario, split, prompts_per_domain, seed)}.vllm"
    folder.mkdir(parents=True, exist_ok=True)
    for name in (STEPS_FILE, REQUESTS_FILE, AGREEMENT_FILE):
        (folder / name).unlink(missing_ok=True)
    return folder


def proposer_drafters(scenario: Scenario) -> tuple[str, ...]:
    """The drafters the proposer runs for ``scenario``: its draft model where the scenario drafts
    with it, and the n-gram lookup."""
    return (DRAFT, LOOKUP_DRAFTER) if DRAFT in scenario.drafters else (LOOKUP_DRAFTER,)


#: The KV cache vLLM's CPU build gets for a collection (its own default reserves 92% of the
#: machine's memory and refuses to start when less is free); $VLLM_CPU_KVCACHE_SPACE overrides it.
CPU_KV_CACHE_BYTES = 2 << 30


def cpu_cache() -> dict[str, int]:
    """``kv_cache_memory_bytes`` for vLLM's CPU build where $VLLM_CPU_KVCACHE_SPACE is unset, else
    nothing (a GPU sizes its cache by its free memory)."""
    from vllm.platforms import current_platform

    if current_platform.is_cpu() and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
        return {"kv_cache_memory_bytes": CPU_KV_CACHE_BYTES}
    return {}


def serve(
    pair: ModelPair,
    scenario: Scenario,
    prompts: Sequence[ServedPrompt],
    folder: Path,
    controller: str,
    max_num_seqs: int,
    seed: int,
    progress: bool = False,
) -> list[ServedOutput]:
    """Every prompt served by one vLLM engine of the pair's target with specrl's proposer
    recording into ``folder``: the outputs, in order."""
    from specrl.vllm.compat import require_vllm

    require_vllm()
    from vllm import LLM, SamplingParams

    settings = {
        "controller": controller,
        "temperature": scenario.sampling.temperature,
        "max_new_tokens": scenario.max_new_tokens,
        "record": str(folder),
    }
    if DRAFT in proposer_drafters(scenario):
        settings["draft"] = pair.draft.name_or_path
    llm = LLM(
        model=pair.target.name_or_path,
        max_model_len=pair.context_length,
        max_num_seqs=max_num_seqs,
        seed=seed,
        dtype=str(pair.dtype).removeprefix("torch."),
        **cpu_cache(),
        speculative_config={
            "method": "custom_class",
            "model": "specrl.vllm.Proposer",
            "num_speculative_tokens": scenario.k_max,
        },
        additional_config={"specrl": settings},
    )
    sampling = scenario.sampling
    params = [
        SamplingParams(
            temperature=sampling.temperature,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            max_tokens=served.budget,
            ignore_eos=not scenario.stop_at_eos,
            seed=served.job.seed,
        )
        for served in prompts
    ]
    results = llm.generate([{"prompt_token_ids": p.prompt} for p in prompts], params, use_tqdm=progress)
    outputs = [
        ServedOutput(list(result.outputs[0].token_ids), result.outputs[0].finish_reason == "stop")
        for result in results
    ]
    del llm, results
    gc.collect()  # the engine's KV cache and the proposer (closing its recording)
    return outputs


def analysed(
    pair: ModelPair,
    scenario: Scenario,
    prompts: Sequence[ServedPrompt],
    outputs: Sequence[ServedOutput],
    progress: bool = False,
) -> list[Trace]:
    """The trace of every request, in order (:func:`vllm_trace`)."""
    from tqdm.auto import tqdm

    served = tqdm(
        zip(prompts, outputs, strict=True),
        f"traces {scenario.name}/{scenario.prompts.split} (vLLM)",
        len(prompts),
        disable=not progress,
    )
    return [vllm_trace(pair, scenario, prompt, output) for prompt, output in served]


def vllm_trace(pair: ModelPair, scenario: Scenario, served: ServedPrompt, output: ServedOutput) -> Trace:
    """The trace of a request vLLM served: its output analysed as the job's own decode would be
    (the same seed for the analysis' draws and for the tokens past an EOS)."""
    job = served.job
    generator = torch.Generator(device=pair.device).manual_seed(job.seed)
    segment = analysed_segment(
        scenario, pair, served.prompt, output.tokens, (served.budget, output.eos), job.seed, generator
    )
    return Trace(domain=job.domain, prompt_index=job.prompt_index, seed=job.seed, segments=[segment])


def matched_requests(
    prompts: Sequence[ServedPrompt], recorded: Sequence[RecordedRequest]
) -> list[RecordedRequest | None]:
    """The recorded request of each prompt (by its prompt's tokens; equal prompts in order of
    arrival), None for a prompt not recorded."""
    by_prompt: dict[tuple[int, ...], list[RecordedRequest]] = {}
    for request in recorded:
        by_prompt.setdefault(tuple(request.prompt), []).append(request)
    return [(by_prompt.get(tuple(p.prompt)) or [None]).pop(0) for p in prompts]
