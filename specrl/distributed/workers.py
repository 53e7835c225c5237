"""Work sharded by prompt across Ray workers, each loading the pair once.

A :class:`RayPool` holds up to ``workers`` actors (:class:`PairWorker`), made on first use and
reused by every later call. Jobs are cut into contiguous shards, one per worker, and the results
joined in the jobs' order; every job carries its own seeds, so the result is a single process's.
A shard whose worker dies is retried once on a fresh worker, then
:class:`~specrl.distributed.cluster.WorkerLost` names its prompts; an exception raised by the work
itself is re-raised as it is.
"""

from __future__ import annotations

import math
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import torch

from specrl.distributed.cluster import LOCAL, RayError, WorkerLost, connect
from specrl.envs.recording import record_jobs, recording_env, trace_jobs, trace_meta
from specrl.envs.scenario import PairSpec, Scenario
from specrl.envs.spec_decode import SpecDecodeEnv
from specrl.evaluation.harness import run_real_loop
from specrl.traces.format import TraceSet

J = TypeVar("J")


def shards(jobs: Sequence[J], count: int) -> list[list[J]]:
    """``jobs`` cut into at most ``count`` contiguous, non-empty parts whose sizes differ by at most
    one; joined in order they give ``jobs`` back."""
    count = max(1, min(count, len(jobs)))
    base, extra = divmod(len(jobs), count)
    parts, start = [], 0
    for i in range(count):
        end = start + base + (i < extra)
        parts.append(list(jobs[start:end]))
        start = end
    return parts


class PairWorker:
    """A Ray actor's state: the pair, loaded once; records traces and plays real-loop episodes."""

    def __init__(self, spec: PairSpec, threads: int | None) -> None:
        if threads:
            torch.set_num_threads(threads)
        self.pair = spec.load()

    def where(self) -> str:
        return f"{socket.gethostname()}:{os.getpid()} ({self.pair.device})"

    def record(self, jobs: list, scenario: Scenario, split: str, prompts_per_domain: int | None, seed: int):
        """The traces of ``jobs`` and the meta of their set."""
        env = recording_env(self.pair, scenario, split)
        meta = trace_meta(self.pair, env.scenario, split, prompts_per_domain, seed)
        return record_jobs(env, jobs), meta

    def real_loop(self, episodes: list, scenario: Scenario, latency, controllers, best_static, settings):
        """:func:`specrl.evaluation.harness.run_real_loop` on ``episodes``, this worker's share."""
        env = SpecDecodeEnv(scenario, pair=self.pair, time=settings.time, latency=latency)
        factories = {name: (lambda c=c: c) for name, c in controllers.items()}
        return run_real_loop(env, episodes, factories, best_static, replace(settings, progress=False))


class RayPool:
    """Ray workers that each hold the pair ``spec`` loads (a local target/draft path must exist
    on every node).

    Args:
        address: where Ray runs (:func:`~specrl.distributed.cluster.connect`).
        workers: default: the cluster's CPUs / ``cpus_per_worker`` (its GPUs / ``gpus_per_worker``
            when the pair runs on CUDA).
        cpus_per_worker: CPUs Ray reserves for a worker, and torch's threads in it.
        gpus_per_worker: default 1 when the cluster has GPUs and the pair does not ask for the
            CPU, else 0.
        worker: the actor class (a :class:`PairWorker`; a subclass can add work).
    """

    def __init__(
        self,
        spec: PairSpec,
        *,
        address: str | None = LOCAL,
        workers: int | None = None,
        cpus_per_worker: float = 1.0,
        gpus_per_worker: float | None = None,
        worker: type = PairWorker,
    ) -> None:
        self.ray = connect(address)
        resources = self.ray.cluster_resources()
        if gpus_per_worker is None:
            gpus_per_worker = 1.0 if resources.get("GPU", 0) >= 1 and spec.device != "cpu" else 0.0
        if workers is None:
            by_cpu = int(resources.get("CPU", 1) // cpus_per_worker)
            workers = int(resources.get("GPU", 0) // gpus_per_worker) if gpus_per_worker else by_cpu
        if workers < 1:
            raise RayError(
                f"the Ray cluster has {resources.get('CPU', 0):g} CPUs and {resources.get('GPU', 0):g} GPUs: "
                f"not enough for one worker of {cpus_per_worker:g} CPUs and {gpus_per_worker:g} GPUs"
            )
        self.spec, self.workers = spec, workers
        options = dict(num_cpus=cpus_per_worker, num_gpus=gpus_per_worker, max_restarts=0)
        self._actor_class = self.ray.remote(**options)(worker)
        self._threads = max(1, math.floor(cpus_per_worker))
        self._actors: list[Any] = []

    def _fresh(self) -> Any:
        return self._actor_class.remote(self.spec, self._threads)

    def _actor(self, i: int) -> Any:
        while len(self._actors) <= i:
            self._actors.append(self._fresh())
        return self._actors[i]

    def run(
        self,
        method: str,
        jobs: Sequence[J],
        *args: Any,
        describe: Callable[[J], str] = str,
        desc: str | None = None,
    ) -> list[Any]:
        """``method`` of the workers on ``shards(jobs, workers)``, each with ``*args``; the
        results in shard order. ``desc``: a progress bar over the shards, so labelled."""
        from tqdm.auto import tqdm

        parts = shards(jobs, self.workers)
        bar = tqdm(total=len(parts), desc=desc, unit="shard", disable=desc is None)
        pending = {self._call(i, method, part, args): (i, 0) for i, part in enumerate(parts)}
        results: list[Any] = [None] * len(parts)
        while pending:
            [done], _ = self.ray.wait(list(pending), num_returns=1)
            i, tries = pending.pop(done)
            try:
                results[i] = self.ray.get(done)
            except self.ray.exceptions.RayTaskError as error:  # the work itself failed: no retry
                raise error.as_instanceof_cause() from None
            except self.ray.exceptions.RayError as error:  # the worker died or was lost
                if tries >= 1:
                    lost = [describe(job) for job in parts[i]]
                    cause = str(error).strip().splitlines()[0][:200]
                    raise WorkerLost(
                        f"a Ray worker died twice on shard {i + 1}/{len(parts)} ({cause}); the prompts "
                        f"lost: {', '.join(lost)}",
                        lost,
                    ) from error
                self._actors[i] = self._fresh()
                pending[self._call(i, method, parts[i], args)] = (i, tries + 1)
                continue
            bar.update()
        bar.close()
        return results

    def _call(self, i: int, method: str, part: list, args: tuple) -> Any:
        return getattr(self._actor(i), method).remote(part, *args)

    def where(self) -> list[str]:
        """Each started worker's host, process and device (none is started to answer)."""
        return self.ray.get([actor.where.remote() for actor in self._actors])

    def collector(self) -> Callable[..., TraceSet]:
        """A trace collector (:data:`specrl.envs.recording.Collect`) that records on the workers:
        for :func:`specrl.envs.recording.cached_traces` (or every collection inside
        :func:`~specrl.envs.recording.recording_with`)."""

        def collect(pair, scenario, split, *, prompts_per_domain=None, seed=0, progress=True) -> TraceSet:
            prompts = scenario.with_overrides(split=split)
            jobs = trace_jobs(prompts, prompts.prompt_sets(pair), prompts_per_domain, seed)
            parts = self.run(
                "record",
                jobs,
                scenario,
                split,
                prompts_per_domain,
                seed,
                describe=lambda job: job.describe(),
                desc=f"traces {scenario.name}/{split} on {self.workers} Ray workers" if progress else None,
            )
            traces = [trace for part, _ in parts for trace in part]
            return TraceSet.from_traces(traces, parts[0][1])

        return collect

    def real_loop(self, env, episodes, factories, best_static, settings):
        """:func:`~specrl.evaluation.harness.run_real_loop` sharded by episode: every worker plays
        every row on its share (its own warm-up first), and the records are joined in the plan's
        order. ``env`` gives the scenario and latency model; its pair is not used here."""
        controllers = {name: make() for name, make in factories.items()}
        parts = self.run(
            "real_loop",
            episodes,
            env.scenario,
            env.latency,
            controllers,
            best_static,
            settings,
            describe=lambda e: f"{e.domain}#{e.prompt_index}",
            desc=f"{env.scenario.name} real loop on Ray" if settings.progress else None,
        )
        records = {
            row: [[r for part, _ in parts for r in part[row][repeat]] for repeat in range(len(repeats))]
            for row, repeats in parts[0][0].items()
        }
        return records, parts[0][1]

    def close(self) -> None:
        for actor in self._actors:
            self.ray.kill(actor)
        self._actors = []
