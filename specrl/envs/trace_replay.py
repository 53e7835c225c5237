"""The replay env: the real loop's acceptance process replayed from traces, time modeled, for one
sequence or a batch of requests (``specrl/TraceReplay-v0``; ``specrl/BatchReplay-v0`` is the same
env on a batch scenario).

A batch is rows that each replay their own trace with the same action (as vLLM and TensorRT-LLM
speculate), filled as the scenario's ``batch:`` section says (:class:`~specrl.envs.scenario.BatchSpec`):
a fixed size whose finished rows are replaced at once, or requests arriving at a piecewise-constant
Poisson rate in modeled time. A step replays every row (:func:`~specrl.envs.replay.replay_step`) and
costs the latency model's seconds for its rows at the width of their KV cache grid (the engine's
:class:`~specrl.engine.grid.SlotGrid`, on token counts), plus the prefill of the requests it admits.

A scenario with ``batch.share`` replays one request as a row of a fixed batch whose ``size`` rows
all act as it does: a step costs the batch's seconds over ``size`` (the price features are ratios
of seconds: the share leaves them as a request inside the serving engine sees them), and the
features see ``size`` rows. Per-request policies train there (:class:`~specrl.envs.scenario.BatchSpec`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from specrl.controllers.stop_rules import AcceptancePredictor, stop_rule_table
from specrl.engine.grid import COMPACT_AT, SlotGrid
from specrl.engine.types import Action, Outcome, StepResult, merge_rows
from specrl.envs.actions import make_action_space, to_engine_action
from specrl.envs.recording import cached_traces
from specrl.envs.replay import replay_step, segment_acceptance
from specrl.envs.reward import step_info, step_reward
from specrl.envs.scenario import Scenario, load_scenario
from specrl.envs.trace_store import with_scenario
from specrl.features import FEATURE_HIGH, FEATURE_LOW, N_FEATURES, FeatureTracker, GenerationSettings
from specrl.latency import LatencyFamily, LatencyModel, step_shape
from specrl.models import ModelPair
from specrl.traces import Segment, Trace, TraceSet

RESET_OPTIONS = ("trace_index", "domain", "prompt_index")


def realise_acceptance(
    trace: Trace, rng: np.random.Generator, drafters: tuple[str, ...]
) -> list[dict[str, list[bool]]]:
    """Per segment, drafter and position, whether a proposal there is accepted (see
    ``replay_step``): one uniform per position, shared by the drafters."""
    return [
        segment_acceptance(segment, drafters, rng.random(len(segment.accept_prob)).tolist())
        for segment in trace.segments
    ]


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


def request_arrivals(
    scenario: Scenario, latency: LatencyModel | None, count: int, rng: np.random.Generator
) -> list[float]:
    """When each of ``count`` requests of ``scenario`` arrives, on the machine ``latency`` prices
    (needed for a load relative to it, :meth:`BatchSpec.seconds_load`): all at 0 for a fixed batch."""
    spec = scenario.batch
    if not spec.arrivals:
        return [0.0] * count
    return arrival_times(spec.seconds_load(latency, scenario.max_new_tokens), count, rng)


@dataclass
class Row:
    """One request: its trace, where it is, its acceptance draws (per segment and drafter) and the
    tokens it emitted over every segment."""

    request: int
    trace_index: int
    trace: Trace
    accepts: list[dict[str, list[bool]]]
    segment_index: int = 0
    position: int = 0
    emitted: int = 0
    segment: Segment = field(init=False)  # the trace's segment_index-th (kept: read every step)

    def __post_init__(self) -> None:
        self.segment = self.trace.segments[self.segment_index]

    @property
    def context_length(self) -> int:
        """Tokens in the sequence before the next step."""
        return self.segment.prompt_length + self.position

    @property
    def done(self) -> bool:
        return self.position >= self.segment.end

    def advance(self, tokens: int) -> bool:
        """Emit ``tokens``; True when that ends a segment with another after it (the row moves on)."""
        self.position += tokens
        self.emitted += tokens
        if self.position >= self.segment.end and self.segment_index + 1 < len(self.trace.segments):
            self.segment_index += 1
            self.segment = self.trace.segments[self.segment_index]
            self.position = 0
            return True
        return False


class TraceReplayEnv(gym.Env):
    """Choose (k, tau) for each speculative step, replayed from recorded traces (the module doc).

    The task of :class:`~specrl.envs.SpecDecodeEnv` (its action space, observation, reward and
    ``info``), without running a model: each request replays one trace (:mod:`specrl.traces`)
    of the scenario, drafting along it as the engine would and accepting as the real loop does
    (greedy: deterministically; sampled: one Bernoulli(min(1, q/p)) draw per position, made at
    reset); time is always modeled. A greedy episode of one sequence equals the real env's step
    by step; a sampled one, in distribution. Every row of a batch takes the same action; the
    observation sees the batch as one step. dt_t adds the prefill of the requests admitted after
    the step; rho is plain decoding at the batch's nominal rows
    (:meth:`Scenario.reference_throughput`).

    ``reset(seed=, options=)`` draws, for each of ``batch.requests`` requests, a domain with the
    scenario's weights (among those the traces hold), a trace of it and its acceptance draws,
    then the arrival times under a load, all from ``self.np_random``; ``options`` choose the first
    request's trace: ``trace_index``, or ``domain`` and ``prompt_index``. The episode terminates
    when every request is served.

    Arguments:

    - ``scenario``: a YAML path, a shipped scenario name or a :class:`Scenario`.
    - ``traces``: a :class:`TraceSet` (default: the scenario's shipped or cached ones for ``split``).
    - ``latency``: a :class:`LatencyModel` (default: the scenario's, over batch sizes for a batch),
      or a :class:`~specrl.latency.LatencyFamily`, from which each reset draws the episode's machine.
    - ``pair``: a :class:`ModelPair`, used only when traces or latency are not given.
    - ``split``: "train", "validation" or "test" (default: the scenario's).
    - ``predictor``: an :class:`~specrl.controllers.stop_rules.AcceptancePredictor`; adds the stop dimension.
    - ``prepare``: record missing traces and calibrate a missing latency model now (the pair is
      loaded); without it, :class:`~specrl.envs.scenario.SetupError` names the command that makes them.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        scenario: str | Path | Scenario = "code",
        traces: TraceSet | None = None,
        latency: LatencyModel | LatencyFamily | None = None,
        pair: ModelPair | None = None,
        split: str | None = None,
        predictor: AcceptancePredictor | None = None,
        render_mode: str | None = None,
        prepare: bool = False,
    ) -> None:
        if render_mode is not None:
            raise ValueError(f"{type(self).__name__} does not render; got render_mode={render_mode!r}")
        if not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        self.scenario = scenario.with_overrides(split=split, time="modeled")
        spec = self.scenario.batch
        if self.scenario.shift and spec.capacity > 1:
            raise ValueError(
                f"scenario '{self.scenario.name}' shifts domain within an episode, which only one row "
                f"at a time replays; its batch holds up to {spec.capacity}"
            )
        if (traces is None or latency is None) and pair is None:
            # name, device and dtype find shipped or cached traces and a cached latency model;
            # the weights are loaded only if something must be recorded or calibrated (prepare)
            pair = self.scenario.pair.info()
        latency = latency or self.scenario.latency_model(pair, calibrate=prepare)
        self.family = latency if isinstance(latency, LatencyFamily) else None
        machines = [m for group in self.family.models for m in group] if self.family else [latency]
        for machine in machines:
            self._check_latency(machine)
        self._price(machines[0])
        if traces is None:
            traces = cached_traces(self.scenario, self.scenario.prompts.split, pair, record=prepare)
        self.traces = with_scenario(traces, self.scenario)
        self.context_window = int(traces.meta["context_window"])
        self.settings = GenerationSettings(
            max_new_tokens=self.scenario.max_new_tokens,
            context_window=self.context_window,
            vocab_size=int(traces.meta["vocab_size"]),
            temperature=self.scenario.sampling.temperature,
            drafters=self.scenario.drafters,
        )
        self.tau_grid = tuple(self.scenario.tau_grid)
        self.predictor = predictor
        self.stop_rules = stop_rule_table(predictor, self.scenario.stop_grid)
        self.drafters = self.scenario.drafters
        self.action_space = make_action_space(self.scenario, predictor)
        self.observation_space = spaces.Box(FEATURE_LOW, FEATURE_HIGH, (N_FEATURES,), np.float32)
        weights = self.scenario.prompts.domains
        self.domains = [d for d in dict.fromkeys(traces.domains) if weights.get(d, 0) > 0]
        if not self.domains:
            raise ValueError(
                f"the traces ({traces.source}) hold domains {sorted(set(traces.domains))}, none "
                f"with a positive weight in scenario '{self.scenario.name}'"
            )
        self.active: list[Row] = []
        self.trace: Trace | None = None

    # ---- the episode ----------------------------------------------------------------------------

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        rng, spec = self.np_random, self.scenario.batch
        if self.family is not None:  # this episode's machine
            self._price(self.family.draw(rng))
        first = self._choose_trace(dict(options or {}))
        self.requests: list[Row] = []
        for request in range(spec.requests):
            index = first if request == 0 else self._choose_trace({})  # drawn
            trace = self.traces.traces[index]
            self.requests.append(Row(request, index, trace, realise_acceptance(trace, rng, self.drafters)))
        self.arrivals = request_arrivals(self.scenario, self.latency, spec.requests, rng)
        self.trace_index, self.trace = first, self.requests[0].trace  # the first request's
        self.clock, self.next_request, self.served = 0.0, 0, 0
        self.busy_seconds, self.tokens = 0.0, 0
        self.active, self.grid = [], SlotGrid()
        prefill = self._admit()
        self.clock += prefill
        self.busy_seconds += prefill
        settings = replace(self.settings, batch_size=self._rows())
        self.features = FeatureTracker(
            settings, self.active[0].segment.prompt_length, self._lookup_match, self.latency.price_line
        )
        self._describe_rows()
        segment = self.trace.segments[0]
        info = {
            "domain": self.trace.domain,
            "prompt_index": self.trace.prompt_index,
            "trace_index": first,
            "split": self.scenario.prompts.split,
            "prompt_tokens": segment.prompt_length,
            "generation_seed": self.trace.seed,
            "batch_size": len(self.active),
            "requests": spec.requests,
            "latency_profile": self.latency.measurement.get("profile", self.latency.device),
        }
        return self.features.vector(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if not self.active:
            raise RuntimeError("call reset() before step(), and reset() again after the episode ends")
        engine_action = to_engine_action(
            action, self.scenario.k_max, self.tau_grid, self.stop_rules, self.drafters
        )
        rows, slots = self.active, self.grid.width
        where = self._domain(rows[0]), rows[0].segment_index  # the first row's, before it moves on
        replayed, draft_seconds, verify_seconds = self._replay(engine_action)
        results, kept, staying, switched = [], [], [], []
        emitted = fed = 0
        for index, (row, step) in enumerate(zip(rows, replayed, strict=True)):
            segment, position, count = row.segment, row.position, step.emitted
            tokens = segment.tokens[position : position + count]
            context = segment.prompt_length + position
            results.append(
                StepResult.assemble(engine_action, step, draft_seconds, verify_seconds, context, tokens)
            )
            kept.append(count)
            emitted += count
            fed = max(fed, step.proposed + 1)  # the rows are right-padded to the longest feed
            if row.advance(count):
                switched.append(index)
            if not row.done:
                staying.append(index)
        self.grid.step(fed, kept)
        for index in switched:  # the next segment's prompt joins the row's cache
            appended = rows[index].segment.prompt_length - 1 - self.grid.lengths[index]
            self.grid.feed(appended, [appended if other == index else 0 for other in range(len(rows))])
        self.features.update(results)
        if len(staying) < len(rows):  # finished rows leave
            self.grid.select(staying)
            self.served += len(rows) - len(staying)
            self.active = [rows[index] for index in staying]
        if self.grid.holes() > COMPACT_AT:
            self.grid.pack()
        self.clock += draft_seconds + verify_seconds
        waiting = self.next_request
        prefill = self._admit()
        self.clock += prefill
        seconds = draft_seconds + verify_seconds + prefill
        self.busy_seconds += seconds
        self.tokens += emitted
        # rows changed outside the step; a share's features count the batch's rows again after the
        # step's one (as specrl's proposer tells each request's features inside vLLM)
        if switched or len(staying) < len(rows) or self.next_request > waiting or self.shared_by > 1:
            self._describe_rows()
        reward = step_reward(emitted, seconds, self.reference_tokens_per_s, self.scenario.reward.scale)
        drafts = sum(result.proposed > 0 for result in results)
        info = step_info(
            merge_rows(results), engine_action, *where, self.tokens, self.busy_seconds, seconds, drafts
        )
        info["prefill_seconds"], info["slots"] = prefill, slots  # the grid's width the step was priced at
        info["batch_size"], info["served"] = len(rows) * self.shared_by, self.served  # the step's rows
        info["step_results"] = results
        return self.features.vector(), float(reward), not self.active, False, info

    def preview(self, k: int, tau: float = 0.0) -> tuple[int, float]:
        """What the next step would emit (tokens over every row) and cost (modeled seconds, before
        the prefill of the requests it lets in) with (k, tau), without taking it: the outcomes are
        the episode's own draws, so this knows the future, for bounds and oracles only."""
        if not self.active:
            raise RuntimeError("call reset() before preview()")
        replayed, draft_seconds, verify_seconds = self._replay(Action(k, tau))
        return sum(step.emitted for step in replayed), draft_seconds + verify_seconds

    def priced_by(self, latency: LatencyModel) -> TraceReplayEnv:
        """A new env of this env's scenario, traces and predictor, every episode priced by
        ``latency`` (one machine of a family, say)."""
        return type(self)(self.scenario, traces=self.traces, latency=latency, predictor=self.predictor)

    def fork(self) -> TraceReplayEnv:
        """A copy of the episode as it stands, sharing the traces, latency model and scenario:
        stepping the copy leaves this env where it is (for labels that look past one step, by
        playing what would follow each action)."""
        if not self.active:
            raise RuntimeError("call reset() before fork()")
        twin = copy.copy(self)
        twin.active = [replace(row) for row in self.active]
        twin.grid = copy.deepcopy(self.grid)
        lookup, self.features.lookup = self.features.lookup, None  # bound to this env: not copied
        twin.features = copy.deepcopy(self.features)
        self.features.lookup = lookup
        twin.features.lookup = None if lookup is None else twin._lookup_match
        return twin

    # ---- helpers ------------------------------------------------------------------------------

    def _rows(self) -> int:
        """The rows the batch holds as the features and the prices see it (with ``batch.share``,
        the batch the one row is a share of)."""
        return len(self.active) * self.shared_by

    def _replay(self, action: Action) -> tuple[list[Outcome], float, float]:
        """Every active row's step with ``action``, and the step's modeled seconds (draft, verify)
        for its rows at the grid's width (a packed engine's: their tokens and mean length); with
        ``batch.share``, the replayed row's share of a batch whose rows all step as it does."""
        drafter, k, tau, stop, window = action.drafter, action.k, action.tau, action.stop, self.context_window
        replayed = [
            replay_step(
                row.segment,
                row.position,
                k,
                tau,
                row.accepts[row.segment_index].get(drafter, ()),
                window,
                stop,
                drafter,
            )
            for row in self.active
        ]
        forwards, proposed = step_shape(replayed)
        rows, context, verified = self._rows(), self.grid.width + 1, None
        if self.latency.packed:  # vLLM: the rows' own tokens and lengths, neither padding nor holes
            context = round(sum(row.context_length for row in self.active) / len(self.active))
            verified = rows + self.shared_by * sum(step.proposed for step in replayed)
        draft_seconds, verify_seconds = self.latency.step_seconds(
            context, forwards, proposed, drafter, rows=rows, verified=verified
        )
        return replayed, draft_seconds / self.shared_by, verify_seconds / self.shared_by

    def _admit(self) -> float:
        """Fill the batch: a fixed batch up to its size; under a load, the requests that have
        arrived, up to max_size; an empty batch waits (idle, not counted) for the next arrival.
        Return the modeled seconds of their prefill."""
        if self.next_request == len(self.requests):  # every request admitted already
            return 0.0
        capacity = self.scenario.batch.capacity
        if not self.active:
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
        if self.shared_by > 1:  # the batch's prompts admitted together: this row's share
            seconds = self.latency.prefill_seconds(lengths * self.shared_by) / self.shared_by
        else:
            seconds = self.latency.prefill_seconds(lengths, len(self.active), context)
        self.grid.admit([length - 1 for length in lengths])  # the caches hold all but the last token
        self.active += joining
        return seconds

    def _describe_rows(self) -> None:
        """The features' batch facts once rows joined or left, or a row's sequence grew outside a
        step: its rows, their mean length and the mean tokens they emitted (the engine's
        ``ControlLoop.rows_changed``; a step's own change the features take from its results)."""
        rows = self.active
        if rows:
            context = sum(row.context_length for row in rows) / len(rows)
            self.features.set_rows(self._rows(), context, sum(row.emitted for row in rows) / len(rows))

    def _lookup_match(self) -> tuple[float, float]:
        """The recorded ``ngram/available`` and ``ngram/order`` where the rows' next step starts,
        means over the rows ((0, 0) at a row's end)."""
        available = order = 0
        for row in self.active:
            fields = row.segment.fields("ngram")
            if row.position < len(fields.available):
                available += fields.available[row.position]
                order += fields.order[row.position]
        rows = max(1, len(self.active))
        return available / rows, order / rows

    def _price(self, latency: LatencyModel) -> None:
        """Price the episodes with ``latency`` (the view of the scenario's sampling), and reward
        against its plain decoding."""
        self.latency = latency.for_sampling(self.scenario.sampling)
        self.reference_tokens_per_s = self.scenario.reference_throughput(self.latency)
        self.shared_by = self.scenario.batch.shared_by

    def _check_latency(self, latency: LatencyModel) -> None:
        rows = self.scenario.batch.capacity * self.scenario.batch.shared_by
        if latency.batch_sizes == (1,) and rows > 1:
            raise ValueError(
                f"the latency model ({latency.kind}, {latency.device}) prices one row only, but scenario "
                f"'{self.scenario.name}' runs up to {rows} rows: give a model over batch sizes "
                "(specrl.latency.calibrated(pair, method='batch'))"
            )
        unpriced = latency.unpriced(self.scenario.drafters)
        if unpriced:
            raise ValueError(
                f"the latency model ({latency.kind}, {latency.device}, pair {latency.pair}) has no price "
                f"for the drafters {unpriced} of scenario '{self.scenario.name}'; measure them with "
                "specrl.latency.calibrated(pair, drafters=...)"
            )

    def _domain(self, row: Row) -> str:
        if row.segment_index == 0:
            return row.trace.domain
        return self.scenario.shift[row.segment_index - 1].domain

    def _choose_trace(self, options: dict[str, Any]) -> int:
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; known: {list(RESET_OPTIONS)}")
        if options.get("trace_index") is not None:
            index = int(options["trace_index"])
            if not 0 <= index < len(self.traces):
                raise ValueError(f"trace_index={index} out of range: {len(self.traces)} traces")
            return index
        domain = options.get("domain") or self.scenario.prompts.draw_domain(
            self.np_random, among=self.domains
        )
        candidates = self.traces.indices_of(domain)
        if not candidates:
            raise ValueError(
                f"no trace of domain {domain!r}; the traces hold {sorted(set(self.traces.domains))}"
            )
        if options.get("prompt_index") is not None:
            matches = [i for i in candidates if self.traces.traces[i].prompt_index == options["prompt_index"]]
            if not matches:
                raise ValueError(f"no trace of domain {domain!r} with prompt_index={options['prompt_index']}")
            return matches[0]
        return candidates[int(self.np_random.integers(len(candidates)))]
