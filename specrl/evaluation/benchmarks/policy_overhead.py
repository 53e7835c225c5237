"""``experiments/policy_overhead.py``'s measurements: the decision overhead of an exported policy,
microseconds per choice and its share of an iteration, measured in a real decode and alone.

In the decode, every ``act`` call, every per-token stop call and (pool policies) every lookup of
the text the features make is timed (:mod:`.timed_policy`); the mean iteration time is the
decode's draft + verify seconds (device-synchronised) per step. Alone, ``act`` is called on the
observations the decode produced, after an untimed warm-up. The share of an iteration is the
median, over iterations, of the step decision plus that step's stop calls (plus its lookup), over
the mean iteration time.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

import specrl
from specrl.controllers import LearnedController
from specrl.evaluation.benchmarks.timed_policy import TimedController, timed_lookups

FALLBACK_PROMPT = "def fib(n):"  # for pairs without embedded prompt sets (hub pairs)


def held_out_prompts(pair: specrl.ModelPair, per_domain: int) -> list[str]:
    """The first ``per_domain`` test prompts of every domain, or one fixed prompt."""
    test = pair.prompts.get("test", {})
    prompts = [prompt for domain in sorted(test) for prompt in test[domain][:per_domain]]
    return prompts or [FALLBACK_PROMPT]


def decode(
    pair: specrl.ModelPair,
    timed: TimedController,
    prompts: list[str],
    max_new_tokens: int,
    temperature: float,
) -> dict[str, float]:
    """Decode ``prompts`` with the timed policy (one untimed warm-up generation first)."""
    decoder = specrl.SpeculativeDecoder(pair, timed)
    options = {"max_new_tokens": max_new_tokens, "temperature": temperature}
    decoder.generate(prompts[0], **options)  # warm-up: allocator, kernels, the exported program
    timed.clear()
    steps = tokens = 0
    decode_seconds = 0.0
    for seed, prompt in enumerate(prompts):
        stats = decoder.generate(prompt, seed=seed, **options).stats
        steps += stats.steps
        tokens += stats.new_tokens
        decode_seconds += stats.decode_seconds
    return {
        "generations": len(prompts),
        "steps": steps,
        "tokens": tokens,
        "mean_iteration_ms": 1e3 * decode_seconds / max(1, steps),
        "decode_tokens_per_s": tokens / decode_seconds if decode_seconds > 0 else 0.0,
    }


def time_alone(
    controller: LearnedController, observations: list[np.ndarray], calls: int, warmup: int
) -> np.ndarray:
    """Nanoseconds of each of ``calls`` act calls, cycling through ``observations``, after a warm-up."""
    for i in range(warmup):
        controller.act(observations[i % len(observations)])
    elapsed = np.empty(calls, dtype=np.int64)
    for i in range(calls):
        observation = observations[i % len(observations)]
        start = time.perf_counter_ns()
        controller.act(observation)
        elapsed[i] = time.perf_counter_ns() - start
    return elapsed


def measure(
    controller: LearnedController,
    pair: specrl.ModelPair,
    prompts_per_domain: int = 2,
    max_new_tokens: int = 128,
    temperature: float = 0.0,
    calls: int = 20000,
    warmup: int = 1000,
) -> dict[str, Any]:
    """Both measurements of ``controller`` on ``pair``: microseconds alone (median, p90), in the
    decode (the step decision, the stop calls, the lookup, all of it per iteration), the decode's
    counts and mean iteration, and the decision's share of an iteration."""
    timed = TimedController(controller)
    with timed_lookups(timed):
        decoded = decode(pair, timed, held_out_prompts(pair, prompts_per_domain), max_new_tokens, temperature)
    in_decode_us = np.median(timed.act_ns) / 1e3
    stop_us = np.asarray(timed.stop_ns) / 1e3
    # one lookup before each decision (and one after the last step of each generation)
    lookup_us = np.zeros(len(stop_us))
    if timed.lookup_ns:
        lookup_us = np.asarray(timed.lookup_ns[: len(stop_us)]) / 1e3
    decision_us = np.median(np.asarray(timed.act_ns) / 1e3 + stop_us + lookup_us)
    alone_us = time_alone(controller, timed.observations, calls, warmup) / 1e3
    return {
        "alone_us_median": float(np.median(alone_us)),
        "alone_us_p90": float(np.percentile(alone_us, 90)),
        "alone_calls": calls,
        "in_decode_us_median": float(in_decode_us),
        "stop_us_median": float(np.median(stop_us)),
        "stop_us_mean": float(np.mean(stop_us)),
        "lookup_us_median": float(np.median(lookup_us)),
        "decision_us_median": float(decision_us),
        **decoded,
        # the step decision and the per-token stop calls together, per iteration
        "share_of_iteration": float(decision_us / 1e3 / decoded["mean_iteration_ms"]),
    }
