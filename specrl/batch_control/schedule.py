"""The batch-size rules a serving engineer tunes on validation in the batch simulator: the vLLM /
TensorRT-LLM schedule (the best k at each fixed batch size) and the switch that ends speculation
above a batch size (vLLM's ``speculative_disable_by_batch_size``), for any controller."""

from __future__ import annotations

import math
from collections.abc import Mapping

from tqdm.auto import tqdm

from specrl.controllers.batch_schedule import BatchCutoffController
from specrl.controllers.static import StaticController
from specrl.envs.batch_replay import BatchReplayEnv
from specrl.envs.scenario import load_scenario
from specrl.trace_evaluation import controller_throughput

#: The fixed-batch scenarios the schedule and the cut-off are tuned on, smallest first.
FIXED = ["batch_1", "batch_4", "batch_16", "batch_64"]
#: The scenarios whose load varies (continuous batching with arrivals).
ARRIVALS = ["arrivals"]


def batch_of(name: str) -> int:
    """The batch size of the fixed-batch scenario ``name``."""
    return load_scenario(name).batch.size


def tune_schedule(envs: dict[str, BatchReplayEnv], episodes: int) -> tuple[dict[int, int], dict[int, int]]:
    """The best k at each fixed batch (scenario name -> its validation env) and the schedule from it."""
    best_k = {}
    for name, env in tqdm(envs.items(), desc="tune the schedule (validation)"):
        speeds = {
            k: controller_throughput(env, StaticController(k), episodes)
            for k in range(env.scenario.k_max + 1)
        }
        best_k[batch_of(name)] = max(speeds, key=speeds.get)
    return best_k, schedule_from_best_k(best_k)


def tune_cutoff(envs: dict[str, BatchReplayEnv], controller, episodes: int) -> int | None:
    """The cut-off of :class:`BatchCutoffController` for ``controller``: :func:`cutoff_from` its
    throughput over plain decoding's at each fixed batch (scenario name -> validation env)."""
    plain = StaticController(0)
    return cutoff_from(
        {
            batch_of(name): controller_throughput(env, controller, episodes)
            / controller_throughput(env, plain, episodes)
            for name, env in envs.items()
        }
    )


def schedule_from_best_k(best_k: Mapping[int, int]) -> dict[int, int]:
    """A schedule from the best k measured at some batch sizes: each size's k holds up to the
    geometric middle between it and the next size (the last one's up to that size), 0 above the
    last positive k, equal neighbours merged."""
    sizes = sorted(best_k)
    schedule: dict[int, int] = {}
    for i, size in enumerate(sizes):
        bound = math.isqrt(size * sizes[i + 1]) if i + 1 < len(sizes) else size  # nothing measured above
        schedule[bound] = int(best_k[size])
    while schedule and list(schedule.values())[-1] == 0:  # 0 above the cut-off is the default
        schedule.pop(list(schedule)[-1])
    merged: dict[int, int] = {}
    for bound, k in schedule.items():  # a run of equal k is one entry, its largest bound
        if merged and list(merged.values())[-1] == k:
            merged.pop(list(merged)[-1])
        merged[bound] = k
    return merged or {1: 0}


def cutoff_from(vs_plain: dict[int, float]) -> int | None:
    """Batch size -> a controller's throughput over plain decoding's: in order of size, the first
    size where it is slower ends its speculation at the geometric middle between that size and
    the one before (1 if it is the smallest); None if it is never slower."""
    previous = None
    for size in sorted(vs_plain):
        if vs_plain[size] < 1.0:
            return math.isqrt(previous * size) if previous else 1
        previous = size
    return None


def with_cutoff(roster: dict, cutoff: int | None, label: str = "ppo") -> dict:
    """``roster`` with ``LABEL+cutoff``, the controller ``label`` switched off above ``cutoff`` rows,
    if both exist."""
    if label not in roster or cutoff is None:
        return roster
    return {**roster, f"{label}+cutoff": BatchCutoffController(roster[label], cutoff)}
