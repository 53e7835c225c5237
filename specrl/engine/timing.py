"""Device-synchronised clocks: a reading is taken only after queued device work finished."""

from __future__ import annotations

import time

import torch


class DeviceClock:
    """``now()`` in seconds; synchronises CUDA first so kernels are counted where they run."""

    def __init__(self, device: torch.device) -> None:
        self.sync = torch.cuda.synchronize if device.type == "cuda" else None
        self.device = device

    def now(self) -> float:
        if self.sync is not None:
            self.sync(self.device)
        return time.perf_counter()
