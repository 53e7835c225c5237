"""Timed requests served by a vLLM engine on the busy clock, with vLLM's speculative metrics.

Requests arrive on a clock that advances by the engine's measured steps (and jumps to the next
arrival when nothing runs), as :func:`specrl.serving.continuous.serve_continuous` serves specrl's
own engine, so every engine serves the same requests at the same arrival times. Metrics carry
vLLM's names and are computed as vLLM's own logger computes them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import Any

COUNTERS = ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
PREFIX = "vllm:spec_decode_"


def spec_counters(llm: Any) -> dict[str, Any]:
    """vLLM's speculative counters now (zeros without speculation)."""
    counters: dict[str, Any] = {name: 0 for name in COUNTERS} | {"num_accepted_tokens_per_pos": []}
    for metric in llm.get_metrics():
        name = metric.name.removeprefix(PREFIX)
        if name in COUNTERS:
            counters[name] += int(getattr(metric, "value", 0))
        elif name == "num_accepted_tokens_per_pos":
            counters[name] = [int(v) for v in getattr(metric, "values", [])]
    return counters


def spec_summary(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The acceptance rate (accepted / drafted tokens), the mean acceptance length (1 + accepted per
    draft) and the acceptance per position (accepted at it per draft) between two readings."""
    drafts = after["num_drafts"] - before["num_drafts"]
    drafted = after["num_draft_tokens"] - before["num_draft_tokens"]
    accepted = after["num_accepted_tokens"] - before["num_accepted_tokens"]
    old = before["num_accepted_tokens_per_pos"] or [0] * len(after["num_accepted_tokens_per_pos"])
    per_position = [a - b for a, b in zip(after["num_accepted_tokens_per_pos"], old, strict=False)]
    return {
        "num_drafts": drafts,
        "num_draft_tokens": drafted,
        "num_accepted_tokens": accepted,
        "acceptance_rate": accepted / drafted if drafted else None,
        "mean_acceptance_length": 1 + accepted / drafts if drafts else None,
        "acceptance_per_position": [n / drafts for n in per_position] if drafts else [],
    }


def serve(
    llm: Any,
    requests: Sequence[tuple[Sequence[int], float]],
    limit: int,
    max_new_tokens: int,
) -> dict[str, Any]:
    """Serve ``requests`` ((prompt token ids, arrival on the busy clock), in arrival order) greedily
    with at most ``limit`` running; every request generates ``max_new_tokens`` (EOS ignored).

    Returns tokens, busy seconds, tokens per busy second, TPOT p50 and p99 over requests, the mean
    batch, the outputs (token ids per request) and the speculative summary."""
    from vllm import SamplingParams

    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=True)
    before = spec_counters(llm)
    clock = busy = 0.0
    waiting, running = 0, 0
    first: dict[int, float] = {}
    finished: dict[int, float] = {}
    outputs: dict[int, list[int]] = {}
    batches: list[int] = []
    while waiting < len(requests) or running:
        if not running:
            clock = max(clock, requests[waiting][1])  # an idle engine waits for the next arrival
        while waiting < len(requests) and running < limit and requests[waiting][1] <= clock:
            engine.add_request(str(waiting), {"prompt_token_ids": list(requests[waiting][0])}, params)
            waiting, running = waiting + 1, running + 1
        batches.append(running)
        start = time.perf_counter()
        step = engine.step()
        spent = time.perf_counter() - start
        clock, busy = clock + spent, busy + spent
        for output in step:
            index = int(output.request_id)
            tokens = output.outputs[0].token_ids
            if tokens and index not in first:
                first[index] = clock
            if output.finished:
                finished[index], outputs[index] = clock, list(tokens)
                running -= 1
    tokens = sum(len(o) for o in outputs.values())
    tpot = [(finished[i] - first[i]) / (len(outputs[i]) - 1) for i in outputs if len(outputs[i]) > 1]
    return {
        "tokens": tokens,
        "busy_seconds": busy,
        "tokens_per_s": tokens / busy if busy else 0.0,
        "tpot_p50": statistics.median(tpot) if tpot else None,
        "tpot_p99": statistics.quantiles(tpot, n=100)[98] if len(tpot) > 1 else None,
        "mean_batch": statistics.fmean(batches) if batches else 0.0,
        "outputs": [outputs[i] for i in range(len(requests))],
        "spec": spec_summary(before, spec_counters(llm)),
    }
