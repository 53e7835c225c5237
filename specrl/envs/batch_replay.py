"""Choose (k, tau) for each batched step of a serving batch, replayed from traces.

The batch simulator (``specrl/BatchReplay-v0``): every row of the batch replays its own trace
(:func:`~specrl.envs.replay.replay_step`, the same step definition as the single-row simulator),
every row takes the same action, and a step costs the batch's time under the latency model over
batch sizes (:class:`~specrl.latency.LatencyModel`, kind "batch") at the width of the batch's
cache grid (:class:`~specrl.engine.grid.SlotGrid`, the engine's own rules on counts); admitting
requests costs their prefill. The
scenario's ``batch:`` section says how the batch fills (:class:`~specrl.envs.scenario.BatchSpec`):
a fixed size whose finished rows are replaced at once, or requests arriving at a
piecewise-constant Poisson rate in modeled time, so the batch grows and shrinks with the load
(continuous batching). Idle time, waiting for the next request with an empty batch, is not a
step and is not counted.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from specrl.engine.grid import COMPACT_AT, SlotGrid
from specrl.engine.types import DEFAULT_DRAFTER, merge_rows
from specrl.envs.actions import make_action_space, to_engine_action
from specrl.envs.recording import cached_traces
from specrl.envs.replay import replay_step
from specrl.envs.reward import step_reward
from specrl.envs.scenario import PairInfo, Scenario, SetupError, load_scenario, loaded_pair
from specrl.envs.scenario.sources import calibrate_command
from specrl.envs.trace_replay import realise_acceptance
from specrl.features import FEATURE_HIGH, FEATURE_LOW, N_FEATURES, FeatureTracker, GenerationSettings
from specrl.latency import LatencyModel, cached_calibration, calibrated, latency_path, step_shape
from specrl.models import ModelPair
from specrl.traces import Segment, TraceSet
from specrl.traces.cache import with_scenario

NOMINAL_CONTEXT = (
    161  # the context (a grid 160 slots wide) at which rho, plain decoding's throughput, is taken
)


@dataclass
class Row:
    """One request in the batch: its trace's segment, where it is, and its acceptance draws."""

    request: int
    segment: Segment
    accepts: list[bool]
    position: int = 0

    @property
    def done(self) -> bool:
        return self.position >= self.segment.end


def arrival_times(load: tuple[tuple[float, float], ...], count: int, rng: np.random.Generator) -> list[float]:
    """``count`` arrival times of a Poisson process whose rate is piecewise constant over the
    repeating phases ``load`` ([(seconds, rate), ...])."""
    times, now, phase, phase_end = [], 0.0, 0, load[0][0]
    while len(times) < count:
        rate = load[phase][1]
        gap = rng.exponential(1.0 / rate) if rate > 0 else np.inf
        if now + gap < phase_end:
            now += gap
            times.append(now)
        else:  # memoryless: restart the draw at the next phase
            now, phase = phase_end, (phase + 1) % len(load)
            phase_end = now + load[phase][0]
    return times


def calibration_prompts(scenario: Scenario, pair: ModelPair, count: int = 96) -> list[list[int]]:
    """``count`` prompts (token ids) drawn from the train split of ``scenario``'s domains."""
    sets = scenario.with_overrides(split="train").prompt_sets(pair)
    domains = [domain for domain, weight in scenario.prompts.domains.items() if weight > 0]
    texts = [text for domain in domains for text in sets[domain]]
    picks = np.random.default_rng(0).integers(len(texts), size=count)
    return [pair.encode(texts[i]) for i in picks]


def scenario_batch_latency(
    scenario: Scenario, pair: ModelPair | PairInfo, calibrate: bool = True
) -> LatencyModel:
    """The pair's latency model over batch sizes on its device covering ``scenario``'s k: the
    cached file, or (``calibrate``) measured and calibrated on the scenario's train prompts, with
    progress, and saved; else a :class:`SetupError` that says how to make it."""
    cached = cached_calibration(pair, k_max=scenario.k_max, method="batch")
    if cached is not None:
        return cached
    if not calibrate:
        command = calibrate_command(pair, scenario.k_max, method="batch")
        raise SetupError(
            f"{scenario.source or scenario.name} needs the latency model over batch sizes of pair "
            f"'{pair.name}' on this device, and {latency_path(pair, 'batch')} does not exist: measure it "
            f"with `{command}` (about 10 minutes, then cached), or pass prepare=True to the env to "
            "measure it now"
        )
    pair = loaded_pair(pair, "measure its batched latency")
    prompts = calibration_prompts(scenario, pair)
    return calibrated(pair, k_max=scenario.k_max, method="batch", prompts=prompts)


class BatchReplayEnv(gym.Env):
    """Choose (k, tau) for each step of a batch of requests, replayed from recorded traces.

    ## Action Space

    ``MultiDiscrete([k_max + 1, len(tau_grid)])``: the same k and tau for every row (as vLLM and
    TensorRT-LLM speculate); an :class:`~specrl.engine.Action` is accepted too.

    ## Observation Space

    ``Box(0, 1, (N_FEATURES,), float32)``: :mod:`specrl.features` of the batch as one step
    (:meth:`FeatureTracker.update`); ``batch_size`` is the number of rows now, and the
    lengths are means over them.

    ## Rewards

    ``(tokens of every row - rho * seconds of the step) / scale``, the seconds including the
    prefill of the requests admitted after it; rho the scenario's
    ``reward.reference_tokens_per_s``, else plain batched decoding's throughput at the nominal
    batch size (``batch.size``, or half of ``batch.max_size`` under a load). An episode emits a
    fixed number of tokens (its requests' traces), so its return orders policies as their busy
    time does, whatever rho is.

    ## Starting State

    ``reset(seed=)`` draws ``batch.requests`` traces (a domain by the scenario's weights, then a
    trace of it uniformly) with their acceptance draws, and the arrival times under a load.

    ## Episode End

    Terminated when every request is served. Never truncated.

    ## Arguments

    ``scenario`` (a name, path or :class:`Scenario` with a ``batch:`` section), ``traces``
    (default: the scenario's shipped or cached traces), ``latency`` (a :class:`LatencyModel` over
    batch sizes; default: the pair's cached one), ``pair``, ``split``, ``prepare`` (record the traces
    and measure the latency model when missing, with progress; without it, what is missing raises
    :class:`~specrl.envs.scenario.SetupError` naming the command that makes it).

    ## Version History

    - v0: initial version.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        scenario: str | Path | Scenario = "batch_16",
        traces: TraceSet | None = None,
        latency: LatencyModel | None = None,
        pair: Any = None,
        split: str | None = None,
        render_mode: str | None = None,
        prepare: bool = False,
    ) -> None:
        if render_mode is not None:
            raise ValueError(f"BatchReplayEnv does not render; got render_mode={render_mode!r}")
        if not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        self.scenario = scenario.with_overrides(split=split, time="modeled")
        if self.scenario.drafters != (DEFAULT_DRAFTER,):
            raise ValueError(
                f"the batch simulator drafts with the draft only; scenario '{self.scenario.name}' offers "
                f"{list(self.scenario.drafters)}"
            )
        if self.scenario.shift:
            raise ValueError(
                f"the batch simulator replays one segment a request; '{self.scenario.name}' shifts domain"
            )
        if (traces is None or latency is None) and pair is None:
            pair = self.scenario.pair.info()
        if traces is None:
            traces = cached_traces(self.scenario, self.scenario.prompts.split, pair, record=prepare)
        self.traces = with_scenario(traces, self.scenario)
        latency = latency or scenario_batch_latency(self.scenario, pair, calibrate=prepare)
        self.latency = latency.for_sampling(self.scenario.sampling)
        spec = self.scenario.batch
        rows = spec.max_size if spec.serving else spec.size
        if self.latency.batch_sizes == (1,) and rows > 1:
            raise ValueError(
                f"the latency model ({self.latency.kind}) prices one row only, but scenario "
                f"'{self.scenario.name}' runs up to {rows} rows: give a model over batch sizes "
                "(specrl.latency.calibrated(pair, method='batch'))"
            )
        self.nominal_batch = spec.size if not spec.serving else max(1, spec.max_size // 2)
        self.reference_tokens_per_s = (
            self.scenario.reward.reference_tokens_per_s
            or self.latency.plain_throughput(self.nominal_batch, NOMINAL_CONTEXT)
        )
        self.context_window = int(traces.meta["context_window"])
        self.tau_grid = tuple(self.scenario.tau_grid)
        self.action_space = make_action_space(self.scenario)
        self.observation_space = spaces.Box(FEATURE_LOW, FEATURE_HIGH, (N_FEATURES,), np.float32)
        weights = self.scenario.prompts.domains
        self.domains = [d for d in dict.fromkeys(traces.domains) if weights.get(d, 0) > 0]
        if not self.domains:
            raise ValueError(
                f"the traces ({traces.source}) hold no domain of scenario '{self.scenario.name}'"
            )
        self.active: list[Row] = []

    # ---- the episode --------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if options:
            raise ValueError(f"BatchReplayEnv takes no reset options, got {sorted(options)}")
        rng, spec = self.np_random, self.scenario.batch
        self.requests: list[Row] = []
        for request in range(spec.requests):
            domain = self.scenario.prompts.draw_domain(rng, among=self.domains)
            candidates = self.traces.indices_of(domain)
            trace = self.traces.traces[candidates[rng.integers(len(candidates))]]
            accepts = realise_acceptance(trace, rng, (DEFAULT_DRAFTER,))[0][DEFAULT_DRAFTER]
            self.requests.append(Row(request, trace.segments[0], accepts))
        self.arrivals = (
            arrival_times(spec.load, spec.requests, rng) if spec.serving else [0.0] * spec.requests
        )
        self.clock, self.next_request, self.served = 0.0, 0, 0
        self.busy_seconds, self.tokens = 0.0, 0
        self.active = []
        self.grid = SlotGrid()
        prefill = self._admit()
        self.clock += prefill
        self.busy_seconds += prefill
        settings = GenerationSettings(
            max_new_tokens=self.scenario.max_new_tokens,
            context_window=self.context_window,
            vocab_size=int(self.traces.meta["vocab_size"]),
            temperature=self.scenario.sampling.temperature,
            batch_size=len(self.active),
        )
        self.features = FeatureTracker(settings, self.active[0].segment.prompt_length)
        self._describe_rows()
        return self.features.vector(), {"batch_size": len(self.active), "requests": spec.requests}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.active:
            raise RuntimeError("call reset() before step(), and reset() again after the episode ends")
        engine_action = to_engine_action(action, self.scenario.k_max, self.tau_grid)
        rows, slots = list(self.active), self.grid.width
        replayed, contexts, draft_seconds, verify_seconds = self._replay(engine_action.k, engine_action.tau)
        fed = max(step.proposed for step in replayed) + 1  # the rows are right-padded to the longest feed
        results = []
        for row, step, context in zip(rows, replayed, contexts, strict=True):
            start = row.position
            row.position += step.emitted
            tokens = row.segment.tokens[start : row.position]
            results.append(step.result(engine_action, draft_seconds, verify_seconds, context, tokens))
        emitted = sum(step.emitted for step in replayed)
        self.clock += draft_seconds + verify_seconds
        self.tokens += emitted
        self.grid.step(fed, [step.emitted for step in replayed])
        staying = [index for index, row in enumerate(rows) if not row.done]
        self.grid.select(staying)
        if self.grid.holes() > COMPACT_AT:
            self.grid.pack()
        self.served += len(rows) - len(staying)
        self.active = [rows[index] for index in staying]
        prefill = self._admit()
        self.clock += prefill
        seconds = draft_seconds + verify_seconds + prefill
        self.busy_seconds += seconds
        self.features.update(results)
        self._describe_rows()
        reward = step_reward(emitted, seconds, self.reference_tokens_per_s, self.scenario.reward.scale)
        terminated = not self.active
        info = {
            "tokens": emitted,
            "seconds": seconds,
            "prefill_seconds": prefill,
            "slots": slots,  # the grid's width the step was priced at
            "batch_size": len(rows),
            "k": engine_action.k,
            "tau": engine_action.tau,
            "proposed": sum(step.proposed for step in replayed),
            "accepted": sum(step.accepted for step in replayed),
            "served": self.served,
            "episode_tokens": self.tokens,
            "episode_seconds": self.busy_seconds,
            "step_results": results,
            "step_result": merge_rows(results),  # the batch as one step, for a controller's observe
        }
        return self.features.vector(), float(reward), terminated, False, info

    def preview(self, k: int, tau: float = 0.0) -> tuple[int, float]:
        """What the next step would emit (tokens over every row) and cost (modeled seconds, before
        the prefill of the requests it lets in) with (k, tau), without taking it: the outcomes are
        the episode's own draws, so this knows the future, for bounds and oracles only."""
        if not self.active:
            raise RuntimeError("call reset() before preview()")
        replayed, _, draft_seconds, verify_seconds = self._replay(k, tau)
        return sum(step.emitted for step in replayed), draft_seconds + verify_seconds

    def fork(self) -> BatchReplayEnv:
        """A copy of the episode as it stands, sharing the traces, latency model and scenario:
        stepping the copy leaves this env where it is (for labels that look past one step, by
        playing what would follow each action)."""
        if not self.active:
            raise RuntimeError("call reset() before fork()")
        twin = copy.copy(self)
        twin.active = [replace(row) for row in self.active]
        twin.grid = copy.deepcopy(self.grid)
        twin.features = copy.deepcopy(self.features)
        return twin

    # ---- helpers ------------------------------------------------------------------------------

    def _replay(self, k: int, tau: float) -> tuple[list, list[int], float, float]:
        """Every active row's step with (k, tau), their contexts, and the batch's modeled seconds."""
        replayed = [
            replay_step(row.segment, row.position, k, tau, row.accepts, self.context_window)
            for row in self.active
        ]
        contexts = [row.segment.prompt_length + row.position for row in self.active]
        forwards, proposed = step_shape(replayed)
        draft_seconds, verify_seconds = self.latency.step_seconds(
            self.grid.width + 1, forwards, proposed, rows=len(self.active)
        )
        return replayed, contexts, draft_seconds, verify_seconds

    def _admit(self) -> float:
        """Fill the batch: a fixed batch up to its size; under a load, the requests that have
        arrived, up to max_size; an empty batch waits (idle, not counted) for the next arrival.
        Return the modeled seconds of their prefill."""
        spec = self.scenario.batch
        capacity = spec.max_size if spec.serving else spec.size
        if not self.active and self.next_request < len(self.requests):
            self.clock = max(self.clock, self.arrivals[self.next_request])
        joining = []
        while (
            self.next_request < len(self.requests)
            and len(self.active) + len(joining) < capacity
            and self.arrivals[self.next_request] <= self.clock
        ):
            joining.append(replace(self.requests[self.next_request]))  # the queue's rows stay unplayed
            self.next_request += 1
        if not joining:
            return 0.0
        lengths = [row.segment.prompt_length for row in joining]
        context = self.grid.width + 1 if self.active else 0
        seconds = self.latency.prefill_seconds(lengths, len(self.active), context)
        self.grid.admit([length - 1 for length in lengths])  # the caches hold all but the last token
        self.active += joining
        return seconds

    def _describe_rows(self) -> None:
        """The features' batch facts as of the next decision: its rows, their mean length and progress."""
        if not self.active:
            return
        rows = self.active
        self.features.set_rows(
            batch_size=len(rows),
            context_length=sum(r.segment.prompt_length + r.position for r in rows) / len(rows),
            generated=sum(r.position for r in rows) / len(rows),
        )
