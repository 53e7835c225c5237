"""``TraceReplayEnv``: the real loop's acceptance process replayed from traces, time modeled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from specrl.controllers.stop_rules import AcceptancePredictor, stop_rule_table
from specrl.envs.actions import make_action_space, to_engine_action
from specrl.envs.recording import cached_traces
from specrl.envs.replay import replay_step, segment_acceptance
from specrl.envs.reward import step_info, step_reward
from specrl.envs.scenario import Scenario, load_scenario
from specrl.features import FEATURE_HIGH, FEATURE_LOW, N_FEATURES, FeatureTracker, GenerationSettings
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.traces import Trace, TraceSet, with_scenario

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


class TraceReplayEnv(gym.Env):
    """Choose (k, tau) for each speculative iteration, replayed from recorded traces.

    ## Description

    The same task as :class:`~specrl.envs.SpecDecodeEnv`, without running a model: each
    episode replays one recorded trace (:mod:`specrl.traces`) of the scenario. A step with
    action (k, tau) drafts along the trace exactly as the engine would (the draft's recorded
    confidences, its recorded continuation past a rejection), accepts as the real loop does
    (greedy: deterministically; sampled: one Bernoulli(min(1, q/p)) draw per position, made at
    reset) and takes its time from the latency model. For greedy scenarios a replayed episode
    equals the real env's step by step (tested); for sampling, in distribution. Fast: tens of
    thousands of steps per second per core; :class:`~specrl.envs.VecTraceReplay` steps many of
    these envs as one SB3 VecEnv.

    ## Action Space

    ``MultiDiscrete([k_max + 1, len(tau_grid)])`` as in ``SpecDecodeEnv``, with a third dimension
    ``len(stop_grid)`` (the per-token stop threshold) when an acceptance ``predictor`` is given, and
    a last one ``len(drafters)`` (the drafter index) when the scenario offers several drafters (also
    a :class:`specrl.Action`); invalid actions raise :class:`InvalidActionError`.

    ## Observation Space

    ``Box(0, 1, (33,), float32)``: the features of :mod:`specrl.features`, computed by the same
    :class:`FeatureTracker` from the replayed step results (the lookup feature from the trace).

    ## Rewards

    ``r_t = (n_t - rho * dt_t) / scale`` (:func:`specrl.envs.reward.step_reward`) with dt_t the
    latency model's seconds of the step (time is always modeled here) and rho the scenario's
    ``reward.reference_tokens_per_s``, else the latency model's plain-decoding throughput.

    ## Starting State

    ``reset(seed=, options=)`` draws a domain with the scenario's weights (among the domains
    the traces hold), a trace of that domain uniformly, and the acceptance realisation, all
    from ``self.np_random``. ``options``: ``trace_index``, or ``domain`` and ``prompt_index``.

    ## Episode End

    Terminated when the trace's last segment is emitted (its budget, EOS or the context
    window). Never truncated.

    ## Arguments

    ```python
    gymnasium.make("specrl/TraceReplay-v0", scenario="code")   # shipped/cached traces and latency
    gymnasium.make("specrl/TraceReplay-v0", scenario="code", prepare=True)  # record/calibrate if missing
    gymnasium.make("specrl/TraceReplay-v0", scenario=s, traces=trace_set, latency=model)  # no model loaded
    ```

    - ``scenario``: a YAML path, a shipped scenario name or a :class:`Scenario`.
    - ``traces``: a :class:`TraceSet` (default: the scenario's shipped or cached traces for
      ``split``).
    - ``latency``: a :class:`LatencyModel` (default: the scenario's, see ``latency:``).
    - ``pair``: a loaded :class:`ModelPair`, only used when traces or latency are not given.
    - ``prepare``: record the traces and calibrate the latency model when they are not shipped or
      cached (minutes, with progress; the scenario's pair is loaded, and a line on stderr says so).
      Without it, what is missing raises :class:`~specrl.envs.scenario.SetupError` naming the
      command that makes it: building an env never does minutes of work unasked.
    - ``split``: "train", "validation" or "test" (default: the scenario's).
    - ``predictor``: an :class:`~specrl.controllers.stop_rules.AcceptancePredictor`; adds the
      per-token stop dimension to the action space (``stop_rule_table``).

    ## Version History

    - v0: initial version (observation features version 1, trace format version 1); the drafter
      index and features version 2 (32 features) came with the drafter pool, version 3 (33: the
      lookup's match order) after it, same id.
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        scenario: str | Path | Scenario = "code",
        traces: TraceSet | None = None,
        latency: LatencyModel | None = None,
        pair: ModelPair | None = None,
        split: str | None = None,
        predictor: AcceptancePredictor | None = None,
        render_mode: str | None = None,
        prepare: bool = False,
    ) -> None:
        if render_mode is not None:
            raise ValueError(f"TraceReplayEnv does not render; got render_mode={render_mode!r}")
        if not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        self.scenario = scenario.with_overrides(split=split, time="modeled")
        if (traces is None or latency is None) and pair is None:
            # name, device and dtype find shipped or cached traces and a cached latency model;
            # the weights are loaded only if something must be recorded or calibrated (prepare)
            pair = self.scenario.pair.info()
        if traces is None:
            traces = cached_traces(self.scenario, self.scenario.prompts.split, pair, record=prepare)
        self.traces = with_scenario(traces, self.scenario)
        latency = latency or self.scenario.latency_model(pair, calibrate=prepare)
        self.latency = latency.for_sampling(self.scenario.sampling)
        self.reference_tokens_per_s = self.scenario.reference_throughput(self.latency)
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
        self.trace: Trace | None = None

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        super().reset(seed=seed)
        index = self._choose_trace(dict(options or {}))
        self.trace_index, self.trace = index, self.traces.traces[index]
        self.accepts = realise_acceptance(self.trace, self.np_random, self.drafters)
        self.segment_index, self.position = 0, 0
        self.episode_tokens, self.episode_seconds = 0, 0.0
        segment = self.trace.segments[0]
        self.features = FeatureTracker(self.settings, segment.prompt_length, self._lookup_match)
        info = {
            "domain": self.trace.domain,
            "prompt_index": self.trace.prompt_index,
            "trace_index": index,
            "split": self.scenario.prompts.split,
            "prompt_tokens": segment.prompt_length,
            "generation_seed": self.trace.seed,
        }
        return self.features.vector(), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        if self.trace is None:
            raise RuntimeError("call reset() before step()")
        segment = self.trace.segments[self.segment_index]
        if self.position >= segment.end:
            raise RuntimeError("the episode is over; call reset() to start a new one")
        engine_action = to_engine_action(
            action, self.scenario.k_max, self.tau_grid, self.stop_rules, self.drafters
        )
        context_length = segment.prompt_length + self.position
        drafter = engine_action.drafter
        step = replay_step(
            segment,
            self.position,
            engine_action.k,
            engine_action.tau,
            self.accepts[self.segment_index].get(drafter, ()),
            self.context_window,
            engine_action.stop,
            drafter,
        )
        draft_seconds, verify_seconds = self.latency.step_seconds(
            context_length, len(step.confidences), step.proposed, drafter
        )
        start = self.position
        self.position += step.emitted
        result = step.result(
            engine_action,
            draft_seconds,
            verify_seconds,
            context_length,
            segment.tokens[start : self.position],
        )
        self.features.update([result])
        seconds = draft_seconds + verify_seconds
        self.episode_tokens += step.emitted
        self.episode_seconds += seconds
        reward = step_reward(step.emitted, seconds, self.reference_tokens_per_s, self.scenario.reward.scale)
        info = step_info(
            result,
            engine_action,
            self._domain(),
            self.segment_index,
            self.episode_tokens,
            self.episode_seconds,
        )
        terminated = False
        if self.position >= segment.end:
            if self.segment_index + 1 < len(self.trace.segments):
                self.segment_index += 1
                self.position = 0
                self.features.set_context_length(self.trace.segments[self.segment_index].prompt_length)
            else:
                terminated = True
        return self.features.vector(), float(reward), terminated, False, info

    # ---- helpers ---------------------------------------------------------------------------

    def _lookup_match(self) -> tuple[int, int]:
        """The recorded ``ngram/available`` and ``ngram/order`` where the next step starts ((0, 0)
        at the episode's end)."""
        segment = self.trace.segments[self.segment_index]
        fields = segment.fields("ngram")
        if self.position >= len(fields.available):
            return 0, 0
        return fields.available[self.position], fields.order[self.position]

    def _domain(self) -> str:
        if self.segment_index == 0:
            return self.trace.domain
        return self.scenario.shift[self.segment_index - 1].domain

    def _choose_trace(self, options: dict[str, Any]) -> int:
        unknown = sorted(set(options) - set(RESET_OPTIONS))
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; known: {list(RESET_OPTIONS)}")
        if options.get("trace_index") is not None:
            index = int(options["trace_index"])
            if not 0 <= index < len(self.traces):
                raise ValueError(f"trace_index={index} out of range: {len(self.traces)} traces")
            return index
        domain = options.get("domain") or self._draw_domain()
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

    def _draw_domain(self) -> str:
        return self.scenario.prompts.draw_domain(self.np_random, among=self.domains)
