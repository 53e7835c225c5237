"""vLLM's speculative metrics: its counters read from an engine (``vllm:spec_decode_*``), and the
acceptance rate, mean acceptance length and acceptance per position between two readings, as
vLLM's own logger computes them (``experiments/bench_vllm.py`` serves with them)."""

from __future__ import annotations

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
