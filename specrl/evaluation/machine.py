"""What a benchmark report records of its run beyond :func:`specrl.provenance.machine`: the pair,
its dtype, the HF baseline's variant, the load and the git state; and a warning when the machine
is too busy to measure."""

from __future__ import annotations

import sys

import torch
from transformers.utils import is_sklearn_available

from specrl.hf_assisted import confidence_threshold_variant
from specrl.latency.calibration import cpu_contention
from specrl.models import ModelPair
from specrl.provenance import git_state, load_average, machine


def warn_if_busy(pair: ModelPair) -> None:
    """Warn when the machine is busy: oversubscribed threads slow small models 10-100x."""
    busy = cpu_contention(pair.device)
    if busy and torch.get_num_threads() > 1:
        print(
            f"WARNING: the machine is busy ({busy}); oversubscribed threads can make small models "
            "10-100x slower and the numbers meaningless. Consider --threads 1.",
            file=sys.stderr,
        )


def machine_info(pair: ModelPair) -> dict:
    """:func:`specrl.provenance.machine` on the pair's device with its dtype, whether the HF
    baseline can use sklearn and its threshold variant, the load average and the git state."""
    return machine(pair.device) | {
        "dtype": str(pair.dtype).removeprefix("torch."),
        "sklearn_available": is_sklearn_available(),
        "hf_confidence_threshold": confidence_threshold_variant(),
        "loadavg_start": load_average(),
        "git": git_state(),
    }


def pair_info(pair: ModelPair) -> dict:
    """The pair's name, vocabulary, context window and parameter counts."""
    return {
        "name": pair.name,
        "context_length": pair.context_length,
        "vocab_size": pair.vocab_size,
        "parameters": {
            role: sum(p.numel() for p in model.parameters())
            for role, model in (("target", pair.target), ("draft", pair.draft))
        },
    }
