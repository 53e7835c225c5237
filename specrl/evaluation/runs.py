"""Hugging Face ``generate`` on an evaluation's prompts, and the aggregate of a row (tokens/sec,
acceptance, latency spread) from played episodes (:mod:`specrl.trace_evaluation`).

Definitions used in every report:

- tokens/sec of a repeat: the tokens of all its episodes over their decode seconds (the env's:
  draft + verify, prefill excluded; HF rows: the whole ``generate`` call, prefill included);
  a row's figure is the median over repeats.
- acceptance rate, drafts, draft and accepted tokens, mean acceptance length: vLLM's names and
  definitions (``num_accepted_tokens / num_draft_tokens``; ``1 + num_accepted_tokens /
  num_drafts``, a draft being a step that drafted), over all repeats; None for HF rows.
- tokens per step: new tokens per target forward after the prefill (HF rows: per target forward).
- mean k, mean tau: asked for per step.
- per-token latency: each token a step emits is charged the step's seconds / the tokens it
  emitted; the spread of that distribution (std, coefficient of variation, percentiles), in ms.
"""

from __future__ import annotations

import statistics
from typing import Any

import numpy as np

from specrl.engine.types import GenerationStats, throughput
from specrl.envs.rollout import EpisodeSummary
from specrl.envs.scenario import Scenario
from specrl.envs.spec_decode import SHIFT_SEPARATOR
from specrl.evaluation.roster import Episode
from specrl.hf_assisted import hf_generate
from specrl.models import ModelPair
from specrl.trace_evaluation import EpisodeRecord

#: Bin edges of the per-step acceptance-fraction histogram (accepted / proposed, steps that proposed).
ACCEPTANCE_BINS = tuple(round(0.1 * i, 1) for i in range(11))


def hf_episode(
    pair: ModelPair,
    scenario: Scenario,
    prompt_sets: dict[str, list[str]],
    episode: Episode,
    assistant: Any,
) -> EpisodeRecord:
    """The episode's prompt through HF ``generate``, segment by segment as the env's domain shift
    does (EOS ignored; at a shift, a prompt of the new domain appended after the env's separator,
    the context cut to leave room for the rest). ``steps`` counts target forwards."""
    context = pair.encode(prompt_sets[episode.domain][episode.prompt_index])
    ends = [shift.after_tokens for shift in scenario.shift] + [scenario.max_new_tokens]
    sampling = scenario.sampling
    summary = EpisodeSummary(domain=episode.domain, prompt_index=episode.prompt_index)
    for segment, end in enumerate(ends):
        if segment:
            shift = scenario.shift[segment - 1]
            texts = prompt_sets[shift.domain]
            context = context + pair.encode(SHIFT_SEPARATOR + texts[episode.prompt_index % len(texts)])
        room = pair.context_length - (scenario.max_new_tokens - summary.tokens)
        context = context[-max(1, room) :]
        run = hf_generate(
            pair,
            context,
            end - summary.tokens,
            sampling.temperature,
            episode.seed + segment,
            assistant,
            sampling.top_k,
            sampling.top_p,
        )
        context = context + run.ids
        summary.add(GenerationStats(len(run.ids), run.target_forwards, verify_seconds=run.seconds))
    return EpisodeRecord(summary)


# ---- one row's aggregate ------------------------------------------------------------------------


def spread(values: np.ndarray, weights: np.ndarray | None = None) -> dict[str, float] | None:
    """Mean, std, coefficient of variation and percentiles (p10, p50, p90, p99) of ``values``,
    each value counted ``weights`` times; None if empty."""
    if weights is not None:
        values = np.repeat(values, weights)
    if values.size == 0:
        return None
    mean, std = float(values.mean()), float(values.std())
    p10, p50, p90, p99 = (float(v) for v in np.percentile(values, [10, 50, 90, 99]))
    return {
        "mean": mean,
        "std": std,
        "cv": std / mean if mean > 0 else 0.0,
        "p10": p10,
        "p50": p50,
        "p90": p90,
        "p99": p99,
    }


def aggregate(repeats: list[list[EpisodeRecord]], engine: str = "ours") -> dict[str, Any]:
    """A row's numbers from its episodes (``repeats[r][e]``); ``engine`` "hf" leaves the
    per-step quantities out (None)."""
    per_repeat = [
        throughput(sum(r.summary.tokens for r in rs), sum(r.summary.seconds for r in rs)) for rs in repeats
    ]
    records = [r for records in repeats for r in records]
    total = EpisodeSummary()
    for r in records:
        total.add(r.summary)
    row: dict[str, Any] = {
        "tokens_per_s": statistics.median(per_repeat) if per_repeat else 0.0,
        "tokens_per_s_repeats": per_repeat,
        "tokens": total.tokens,
        "seconds": total.seconds,
        "steps": total.steps,
        "tokens_per_step": total.tokens_per_step,
        "episodes": len(records),
    }
    if engine == "hf":
        per_step = ("acceptance_rate", "mean_acceptance_length", "mean_k", "mean_tau", "step_ms")
        return row | dict.fromkeys((*per_step, "latency_ms_per_token", "step_acceptance_histogram"))
    steps = [s for r in records for s in r.steps]
    tokens = np.array([s.tokens for s in steps], dtype=np.int64)
    seconds = np.array([s.seconds for s in steps], dtype=np.float64)
    emitting = tokens > 0
    fractions = [s.accepted / s.proposed for s in steps if s.proposed]
    counts, _ = np.histogram(fractions, bins=ACCEPTANCE_BINS)
    return row | {
        "acceptance_rate": total.acceptance_rate if total.num_draft_tokens else None,
        "mean_acceptance_length": total.mean_acceptance_length,
        "num_drafts": total.num_drafts,
        "num_draft_tokens": total.num_draft_tokens,
        "num_accepted_tokens": total.num_accepted_tokens,
        "mean_k": total.mean_k,
        "mean_tau": total.mean_tau,
        "latency_ms_per_token": spread(1000 * seconds[emitting] / tokens[emitting], tokens[emitting]),
        "step_ms": spread(1000 * seconds),
        "step_acceptance_histogram": {"edges": list(ACCEPTANCE_BINS), "counts": counts.tolist()},
    }


def trajectory(record: EpisodeRecord) -> dict[str, list]:
    """k, tau, domain, proposed and accepted of each step against the tokens generated before it."""
    steps = record.steps
    return {
        "position": [s.position for s in steps],
        "k": [s.k for s in steps],
        "tau": [s.tau for s in steps],
        "domain": [s.domain for s in steps],
        "proposed": [s.proposed for s in steps],
        "accepted": [s.accepted for s in steps],
    }
