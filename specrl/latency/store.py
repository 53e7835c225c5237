"""Where calibrations are stored: the cache path of a pair on a device, and what names a device
(the CPU model and torch's thread count change CPU latency)."""

from __future__ import annotations

import platform
import re
import time
from pathlib import Path
from typing import Any

import torch

from specrl.models import ModelPair
from specrl.provenance import machine


def _slug(text: str) -> str:
    text = re.sub(r"\((r|tm|c)\)", "", text.lower())
    return re.sub(r"[^a-z0-9.]+", "-", text).strip("-.") or "unknown"


def cpu_name() -> str:
    """The CPU's model name (/proc/cpuinfo), else what the platform says."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1]
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def device_key(device: str | torch.device) -> str:
    """A stable, filename-safe name of what latency depends on besides the models:
    "cpu-<cpu model>-<torch threads>threads", "cuda-<gpu name>", else the device type."""
    device = torch.device(device)
    if device.type == "cpu":
        return f"cpu-{_slug(cpu_name())}-{torch.get_num_threads()}threads"
    if device.type == "cuda":
        return f"cuda-{_slug(torch.cuda.get_device_name(device))}"
    return _slug(device.type)


def dtype_name(dtype: torch.dtype) -> str:
    """The dtype as latency files and cache names write it: "float32", "bfloat16", ..."""
    return str(dtype).removeprefix("torch.")


def latency_path(pair: ModelPair, method: str = "loop") -> Path:
    """Where :func:`~specrl.latency.calibrated` caches the pair's model on this device:
    ``specrl_home()/latency/<pair>__<dtype>__<device key>.json`` (names made filename-safe),
    ``...__static`` or ``...__static-compiled`` before ``.json`` for a pair with a static KV
    cache (the forwards cost otherwise), ``...__profiled.json`` for ``method`` "profile",
    ``...__batch.json`` for "batch"."""
    from specrl.home import specrl_home

    cache = getattr(pair, "cache", None)
    suffix = "" if cache is None or cache.kind == "dynamic" else f"__{cache.kind}"
    suffix += "-compiled" if cache is not None and cache.compile else ""
    suffix += {"profile": "__profiled", "batch": "__batch"}.get(method, "")
    name = f"{_slug(pair.name)}__{dtype_name(pair.dtype)}__{device_key(pair.device)}{suffix}.json"
    return specrl_home() / "latency" / name


def environment() -> dict[str, Any]:
    """The software and machine a measurement ran on (of :func:`specrl.provenance.machine`), and
    when (kept in its ``measurement``)."""
    here = machine()
    return {
        "torch": here["torch"],
        "torch_threads": here["torch_threads"],
        "platform": here["platform"],
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host_cpus": here["cpu_count"],
    }
