"""Continuous batching in the real loop: requests arrive over time, join the running batch when a
row is free, and leave it when they finish; one controller acts once per batched step.

This is the real-loop counterpart of the batch simulator (``specrl/BatchReplay-v0``), with the
same clock: time is the batch's own measured, device-synchronised work (each step's drafting and
verification, and the prefill of the requests it admits), and requests arrive on that clock. A
request is admitted once its arrival time has passed and the batch has fewer than ``max_batch``
rows; an empty batch waits for the next arrival, idle time that no controller is charged for.
Throughput is every request's tokens over the busy seconds. The features are the batch's, as in
the simulator: one ``FeatureTracker`` for the whole run, told the batch's rows after every change.

    scenario = load_scenario("arrivals")  # its load is relative to the machine: priced by its latency
    latency = scenario.latency_model(pair)  # the machine's batch calibration
    requests = scenario_requests(scenario, pair, split="test", seed=0, latency=latency)
    run = serve_continuous(pair, controller, requests, 64, 128, prices=latency.price_line)
    run.tokens_per_s, run.outputs[i], run.batch_sizes

:func:`scenario_requests` draws a scenario's requests the way the batch simulator draws its traces:
each request's domain by the scenario's weights, a prompt of that domain's split uniformly, and the
arrival times of the scenario's ``batch.load`` (all at 0 for a fixed batch; a load relative to the
machine, ``load_unit: plain``, is turned into seconds by the serving machine's latency model).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from tqdm.auto import tqdm

from specrl.controllers.base import Controller
from specrl.engine.decoder import ControlLoop
from specrl.engine.generation import Generation
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Step, throughput
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
    """What a continuous-batching run served.

    Attributes:
        outputs: every request's generated token ids, in request order.
        busy_seconds: the batch's measured work: steps plus prefills.
        prefill_seconds: the part of it spent prefilling admitted requests.
        batch_sizes: the rows of every step, in order.
        ks: every step's k.
        finished_at: every request's completion time on the busy clock (idle waits included).
        admissions: every admission, in order.
    """

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
    """``count`` (default ``batch.requests``) requests of ``scenario``'s ``split`` prompts, in
    arrival order (see the module doc); the same ``seed`` gives the same requests and arrivals.
    ``latency``, the serving machine's latency model over batch sizes, turns a load relative to
    the machine (``batch.load_unit: plain``) into seconds (:meth:`BatchSpec.seconds_load`)."""
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
    on_step: Callable[[Generation, Step], None] | None = None,
    prices: Prices | None = None,
) -> ContinuousRun:
    """Serve ``requests`` (in arrival order) with continuous batching; see the module doc.
    ``on_step(generation, step)``, if given, sees every batched step as it ends. ``prices``: the
    prior of the price features (:mod:`specrl.features`), the machine's batched latency model's
    ``price_line``, as the batch simulator gives it; a policy of feature version 5 reads the
    verification's curve from it. Given none, a policy that reads prices takes this machine's
    cached calibrations (:func:`specrl.engine.decoder.default_prices`); with none cached (a
    warning says so) it sees a flat curve (a GPU's)."""
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
        if on_step is not None:
            on_step(generation, step)
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
