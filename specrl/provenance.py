"""Where a run, a report or an exported policy came from: the git state of the specrl checkout,
the machine, its load and the command line. Only the standard library at import (torch and
transformers are imported by :func:`machine` when called), so every layer may record it."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

#: The checkout specrl runs from, when it runs from one (an installed wheel has no repository).
CHECKOUT = Path(__file__).resolve().parents[1]


def git_output(*args: str, cwd: Path = CHECKOUT) -> str | None:
    """``git ARGS`` in ``cwd``: its stripped output, or None where git is missing or fails."""
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_state(checkout: str | Path | None = None) -> dict:
    """The full commit hash of the specrl checkout (default: the one this specrl is imported from)
    and whether its tracked files have changes; both None outside a checkout of its own (an
    installed specrl may sit inside some other repository) or without git."""
    root = Path(checkout).resolve() if checkout is not None else CHECKOUT
    top = git_output("rev-parse", "--show-toplevel", cwd=root)
    if top is None or Path(top).resolve() != root:
        return {"commit": None, "dirty": None}
    status = git_output("status", "--porcelain", "--untracked-files=no", cwd=root)
    return {
        "commit": git_output("rev-parse", "HEAD", cwd=root),
        "dirty": bool(status) if status is not None else None,
    }


def short_commit(state: dict | None) -> str | None:
    """A recorded :func:`git_state` as its short hash, with ``-dirty`` when tracked files had
    changes (``"63de04b"``, ``"63de04b-dirty"``); None when the commit is unknown."""
    if not state or not state.get("commit"):
        return None
    return state["commit"][:7] + ("-dirty" if state.get("dirty") else "")


def git_commit(checkout: str | Path | None = None) -> str | None:
    """:func:`short_commit` of the specrl checkout now; None outside a checkout of its own."""
    return short_commit(git_state(checkout))


def load_average() -> list[float] | None:
    """The load averages over 1, 5 and 15 minutes, None where the platform has none."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def current_load() -> float | None:
    """The last minute's load average, None where the platform has none."""
    loads = load_average()
    return loads[0] if loads else None


def machine(device: Any = "cpu") -> dict[str, Any]:
    """The machine and software a measurement on ``device`` runs with: platform, CPU, logical
    CPUs, torch's threads, Python, torch, transformers and specrl versions, the device and, on
    CUDA, the GPU's name."""
    import torch
    import transformers

    import specrl

    device = torch.device(device)
    info = {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "specrl": specrl.__version__,
        "device": str(device),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def describe_machine(machine: dict) -> str:
    """One line for a report of a :func:`machine` record (with its ``dtype``): device, dtype, CPUs,
    versions, and the Ray workers where the real loop ran on them."""
    device = machine.get("gpu") or machine["device"]
    line = (
        f"{device} ({machine['dtype']}), {machine['cpu_count']} CPUs ({machine['processor']}), "
        f"torch {machine['torch']}, transformers {machine['transformers']}, Python {machine['python']}"
    )
    ray = machine.get("ray")
    if ray:
        line += f"; real loop on {len(ray['workers'])} Ray workers ({', '.join(ray['workers'])})"
    return line


def machine_clause(device: str) -> str:
    """A result line's short machine: architecture, logical CPUs, torch and the latency model's
    ``device``."""
    import torch

    return f"{platform.machine()}, {os.cpu_count()} logical CPUs, torch {torch.__version__} ({device})"


def command_line() -> str:
    """The command that is running, with the environment variables that change its results."""
    env = " ".join(
        f"{k}={shlex.quote(os.environ[k])}"
        for k in ("SPECRL_HOME", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
        if k in os.environ
    )
    return f"{env + ' ' if env else ''}python {shlex.join(sys.argv)}"
