"""Where and how a benchmark ran: machine, versions, the command; its git state is
:func:`specrl.provenance.git_state`. Recorded in every report."""

from __future__ import annotations

import os
import platform
import shlex
import sys

import torch
import transformers
from transformers.utils import is_sklearn_available

import specrl
from specrl.hf_assisted import confidence_threshold_variant
from specrl.latency.calibration import cpu_contention
from specrl.models import ModelPair
from specrl.provenance import git_state


def warn_if_busy(pair: ModelPair) -> None:
    """Warn when the machine is busy: oversubscribed threads slow small models 10-100x."""
    busy = cpu_contention(pair.device)
    if busy and torch.get_num_threads() > 1:
        print(
            f"WARNING: the machine is busy ({busy}); oversubscribed threads can make small models "
            "10-100x slower and the numbers meaningless. Consider --threads 1.",
            file=sys.stderr,
        )


def loadavg() -> list[float] | None:
    """The load averages over 1, 5 and 15 minutes, None where the platform has none."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def machine_info(pair: ModelPair) -> dict:
    """Platform, CPU/GPU, library versions, the HF threshold variant, load average and git state."""
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "specrl": specrl.__version__,
        "device": str(pair.device),
        "dtype": str(pair.dtype).removeprefix("torch."),
        "sklearn_available": is_sklearn_available(),
        "hf_confidence_threshold": confidence_threshold_variant(),
        "loadavg_start": loadavg(),
        "git": git_state(),
    }
    if pair.device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(pair.device)
    return info


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


def describe_machine(machine: dict) -> str:
    """One line for a report: device, dtype, CPUs, versions."""
    device = machine.get("gpu") or machine["device"]
    line = (
        f"{device} ({machine['dtype']}), {machine['cpu_count']} CPUs ({machine['processor']}), "
        f"torch {machine['torch']}, transformers {machine['transformers']}, Python {machine['python']}"
    )
    ray = machine.get("ray")
    if ray:  # the real loop ran on the workers: say where
        line += f"; real loop on {len(ray['workers'])} Ray workers ({', '.join(ray['workers'])})"
    return line


def machine_clause(device: str) -> str:
    """A result line's short machine: architecture, logical CPUs, torch and the latency model's
    ``device`` (as ``train_ppo.py`` and ``real_loop_check.py`` end their pages)."""
    return f"{platform.machine()}, {os.cpu_count()} logical CPUs, torch {torch.__version__} ({device})"


def command_line() -> str:
    """The command that is running, with the environment variables that change its results."""
    env = " ".join(
        f"{k}={shlex.quote(os.environ[k])}"
        for k in ("SPECRL_HOME", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
        if k in os.environ
    )
    return f"{env + ' ' if env else ''}python {shlex.join(sys.argv)}"
