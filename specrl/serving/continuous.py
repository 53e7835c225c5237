"""Continuous batching in the real loop: requests arrive over time, join the running batch when a
row is free, and leave it when they finish; one controller acts once per batched step.

The real-loop counterpart of the batch simulator (``specrl/BatchReplay-v0``), on the same clock:
the batch's own measured, device-synchronised work (steps, and the prefill of the requests it
admits); an empty batch waits for the next arrival, idle time no controller is charged for.
Throughput is every request's tokens over the busy seconds::

    latency = scenario.latency_model(pair)  # the machine's batch calibration
    requests = scenario_requests(scenario, pair, split="test", seed=0, latency=latency)
    run = serve_continuous(pair, controller, requests, 64, 128, prices=latency.price_line)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from specrl.controllers.base import Controller
from specrl.engine.decoder import ControlLoop
from specrl.engine.generation import Generation
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import throughput
from specrl.envs.scenario import Scenario
from specrl.envs.trace_replay import request_arrivals
from specrl.features import Prices
from specrl.latency import LatencyModel
from specrl.models import ModelPair


@dataclass(frozen=True)
class TimedRequest:
    """A prompt (token ids) and the second, on the batch's busy clock, at which it arrives."""

    prompt_ids: list[int]
    arrival: float = 0.0


@dataclass(frozen=True)
class Admission:
    """Requests admitted together: their prompts' lengths, the rows and the target cache's slot
    width they joined (0 and 0 for a batch starting), and the measured seconds of their prefill."""

    prompt_lengths: list[int]
    rows: int
    slots: int
    seconds: float


@dataclass
class ContinuousRun:
    """What a continuous-batching run served: every request's output (in request order), the busy
    seconds (steps plus prefills) and the prefills' share, every step's rows and k, every request's
    completion time on the clock (idle waits included), and every admission."""

    outputs: list[list[int]]
    busy_seconds: float
    prefill_seconds: float
    batch_sizes: list[int] = field(default_factory=list)
    ks: list[int] = field(default_factory=list)
    finished_at: list[float] = field(default_factory=list)
    admissions: list[Admission] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(len(output) for output in self.outputs)

    @property
    def tokens_per_s(self) -> float:
        return throughput(self.tokens, self.busy_seconds)


def scenario_requests(
    scenario: Scenario,
    pair: ModelPair,
    split: str,
    seed: int,
    count: int | None = None,
    latency: LatencyModel | None = None,
) -> list[TimedRequest]:
    """``count`` (default ``batch.requests``) requests of ``scenario``'s ``split`` prompts, drawn as
    the batch simulator draws its traces, in arrival order (``batch.load``); the same ``seed`` gives
    the same requests and arrivals. ``latency``, the serving machine's latency model, turns a load
    relative to the machine (``batch.load_unit: plain``) into seconds."""
    rng = np.random.default_rng(seed)
    sets = scenario.with_overrides(split=split).prompt_sets(pair)
    count = count or scenario.batch.requests
    prompts = []
    for _ in range(count):
        texts = sets[scenario.prompts.draw_domain(rng)]
        prompts.append(pair.encode(texts[rng.integers(len(texts))]))
    arrivals = request_arrivals(scenario, latency, count, rng)
    return [TimedRequest(prompt, at) for prompt, at in zip(prompts, arrivals, strict=True)]


def serve_continuous(
    pair: ModelPair,
    controller: Controller,
    requests: Sequence[TimedRequest],
    max_batch: int,
    max_new_tokens: int,
    sampling: SamplingConfig | None = None,
    seed: int = 0,
    stop_at_eos: bool = True,
    progress: bool = False,
    prices: Prices | None = None,
) -> ContinuousRun:
    """Serve ``requests`` (in arrival order) with continuous batching (module doc). ``prices``: the
    price features' prior, the machine's batched latency model's ``price_line``, as the batch
    simulator gives it; given none, a policy that reads prices takes this machine's cached
    calibrations (:func:`specrl.engine.decoder.default_prices`)."""
    if not requests:
        raise ValueError("no requests to serve: give at least one TimedRequest")
    if max_batch < 1:
        raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    arrivals = [request.arrival for request in requests]
    if any(later < earlier for earlier, later in zip(arrivals, arrivals[1:], strict=False)):
        raise ValueError("requests must be given in arrival order (their arrival times never decrease)")
    sampling = sampling or SamplingConfig(0.0)
    generation: Generation | None = None
    loop: ControlLoop | None = None
    row_of: dict[int, int] = {}  # generation row -> request index
    clock = busy = 0.0
    waiting = 0  # the next request not yet admitted
    finished_at = [0.0] * len(requests)
    sizes, ks, admissions = [], [], []
    bar = tqdm(total=len(requests), desc="requests served", disable=not progress, leave=False)
    while waiting < len(requests) or (generation is not None and not generation.done):
        if generation is None or generation.done:
            clock = max(clock, arrivals[waiting])  # an empty batch waits for the next arrival
        free = max_batch - (0 if generation is None else generation.batch_size)
        admitted = []
        while waiting < len(requests) and len(admitted) < free and arrivals[waiting] <= clock:
            admitted.append(waiting)
            waiting += 1
        if admitted:
            prompts = [list(requests[i].prompt_ids) for i in admitted]
            before = 0.0 if generation is None else generation.prefill_seconds
            rows_before = 0 if generation is None else generation.batch_size
            slots_before = 0 if generation is None or generation.done else generation.target.slots
            if generation is None:
                generation = Generation(pair, prompts, max_new_tokens, sampling, seed, stop_at_eos)
                rows = list(range(len(prompts)))
                loop = ControlLoop(generation, controller, prices)
            else:
                rows = generation.add(prompts)
            row_of.update(zip(rows, admitted, strict=True))
            spent = generation.prefill_seconds - before
            admissions.append(Admission([len(p) for p in prompts], rows_before, slots_before, spent))
            clock, busy = clock + spent, busy + spent
            loop.rows_changed()
        step = loop.step()
        clock, busy = clock + step.seconds, busy + step.seconds
        sizes.append(step.batch_size)
        ks.append(step.action.k)
        for row in step.finished:
            finished_at[row_of[row]] = clock
        bar.update(len(step.finished))
        if not generation.done:
            loop.rows_changed()
    bar.close()
    outputs: list[list[int]] = [[] for _ in requests]
    for row, request in row_of.items():
        outputs[request] = generation.output_ids(row)
    return ContinuousRun(outputs, busy, generation.prefill_seconds, sizes, ks, finished_at, admissions)
