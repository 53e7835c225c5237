"""``VecTraceReplay``: many trace-replay episodes stepped together with numpy (an SB3 VecEnv).

The same replay as :func:`specrl.envs.replay.replay_step` and the same features as
:class:`specrl.features.FeatureTracker`, written over arrays of episodes: per-episode Python
would cap training at the speed of one core's interpreter. A test steps this and
``TraceReplayEnv`` with the same actions on the same greedy traces and requires identical
observations and rewards, so the two cannot drift apart.

Sampled acceptance is realised when an episode starts, one uniform per stored position of its
trace, drawn exactly as :class:`~specrl.envs.TraceReplayEnv` draws them at reset: an episode
started with a seed (:meth:`VecTraceReplay.start_traces`) sees the very acceptance outcomes of
the single env reset with that seed, so controllers and policies evaluated on the same seeds
share their random draws (common random numbers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from stable_baselines3.common.vec_env import VecEnv

from specrl.controllers.stop_rules import AcceptancePredictor
from specrl.envs.actions import make_action_space
from specrl.envs.reward import step_reward
from specrl.envs.scenario import Scenario
from specrl.features import (
    BATCH_LOG2_NORM,
    CONFIDENCE_WINDOW,
    COST_WINDOW,
    FEATURE_HIGH,
    FEATURE_LOW,
    K_NORM,
    LONG_WINDOW,
    N_FEATURES,
    SHORT_WINDOW,
    TEMPERATURE_NORM,
)
from specrl.latency import LatencyModel
from specrl.traces import TraceSet, with_scenario


class ReplayedSteps(NamedTuple):
    """One replayed step of every episode: arrays of shape (num_envs,), the vectorised
    counterpart of :class:`specrl.envs.replay.ReplayedStep` plus what the features need."""

    k_asked: np.ndarray
    tau: np.ndarray
    forwards: np.ndarray  # draft forwards (the tau-stopped one included)
    proposed: np.ndarray
    accepted: np.ndarray
    emitted: np.ndarray
    confidence_sum: np.ndarray
    confidence_min: np.ndarray
    entropy_sum: np.ndarray
    probability_sum: np.ndarray  # acceptance_probs of the proposals, summed
    accepted_confidence: np.ndarray  # confidences of accepted proposals, summed
    rejected_confidence: np.ndarray  # confidence of the first rejected proposal
    stopped: np.ndarray
    draft_seconds: np.ndarray
    verify_seconds: np.ndarray
    context: np.ndarray  # context length before the step


class _Rings:
    """Fixed-size windows of the last W values per episode, with running sums."""

    def __init__(self, n: int, width: int, fields: int) -> None:
        self.values = np.zeros((fields, n, width))
        self.sums = np.zeros((fields, n))
        self.pointer = np.zeros(n, dtype=np.int64)
        self.count = np.zeros(n, dtype=np.int64)
        self.width = width

    def clear(self, rows: np.ndarray) -> None:
        self.values[:, rows] = 0.0
        self.sums[:, rows] = 0.0
        self.pointer[rows] = 0
        self.count[rows] = 0

    def push(self, rows: np.ndarray, new: np.ndarray) -> None:
        """Append ``new`` (fields, len(rows)) to the windows of ``rows``."""
        slot = self.pointer[rows]
        self.sums[:, rows] += new - self.values[:, rows, slot]  # the evicted value (0 until full)
        self.values[:, rows, slot] = new
        self.pointer[rows] = (slot + 1) % self.width
        self.count[rows] = np.minimum(self.count[rows] + 1, self.width)


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    return np.divide(numerator, denominator, out=np.zeros_like(numerator), where=denominator > 0)


class InProcessVecEnv(VecEnv):
    """A VecEnv whose episodes all live in this object (no sub-envs, no processes): the
    attribute and method plumbing of SB3's interface applies to the object itself."""

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def close(self) -> None:
        pass

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(self, attr_name)] * len(self._get_indices(indices))

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        setattr(self, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list:
        return [getattr(self, method_name)(*method_args, **method_kwargs)] * len(self._get_indices(indices))

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: Any = None) -> list[bool]:
        return [False] * len(self._get_indices(indices))


class VecTraceReplay(InProcessVecEnv):
    """``num_envs`` trace-replay episodes of one scenario, reset automatically when they end.

    Spaces, reward and episode logic are those of :class:`~specrl.envs.TraceReplayEnv`. The
    ``info`` of an episode that ends holds ``terminal_observation`` (SB3's convention) and
    ``episode_tokens``, ``episode_seconds``, ``tokens_per_s``, ``episode_return``, ``domain``,
    ``trace_index`` and the episode's ``steps``, ``proposed``, ``accepted``, ``k_sum`` and
    ``tau_sum``; other infos are
    empty, which keeps a step of a thousand episodes to about a millisecond.

    Example::

        venv = VecTraceReplay(scenario, traces, latency, num_envs=256, seed=0)
        model = PPO("MlpPolicy", venv)
    """

    def __init__(
        self,
        scenario: Scenario,
        traces: TraceSet,
        latency: LatencyModel,
        num_envs: int = 64,
        seed: int | None = None,
        predictor: AcceptancePredictor | None = None,
    ) -> None:
        self.scenario = scenario.with_overrides(time="modeled")
        self.trace_set = with_scenario(traces, self.scenario)
        self.latency = latency.for_sampling(self.scenario.sampling)  # greedy or sampled step costs
        self.k_max = self.scenario.k_max
        self.tau_grid = np.asarray(self.scenario.tau_grid, dtype=np.float64)
        self.reference_tokens_per_s = self.scenario.reference_throughput(self.latency)
        self.scale = self.scenario.reward.scale
        meta = traces.meta
        self.context_window = int(meta["context_window"])
        self.log_vocab = np.log(max(2, int(meta["vocab_size"])))
        self.max_new_tokens = self.scenario.max_new_tokens
        self.constant_features = np.array(
            [min(1.0, self.scenario.sampling.temperature / TEMPERATURE_NORM), 0.0 / BATCH_LOG2_NORM]
        )
        a = traces.arrays
        self.confidence, self.entropy = a["confidence"].astype(np.float64), a["entropy"].astype(np.float64)
        self.accept_prob, self.accepted_ap = (
            a["accept_prob"].astype(np.float64),
            a["accepted_ap"].astype(np.float64),
        )
        self.off_confidence = a["off_confidence"].astype(np.float64)
        self.off_entropy = a["off_entropy"].astype(np.float64)
        self.off_ap = a["off_ap"].astype(np.float64)
        # The per-token stop rule of the third action dimension (stop_rule_table), vectorised:
        # predicted acceptance probabilities at every stored position, on and off the trajectory.
        self.predictor = predictor
        self.stop_grid = np.asarray(self.scenario.stop_grid if predictor else (0.0,), dtype=np.float64)
        if predictor is not None:
            self.on_probability = predictor.probabilities(self.confidence, self.entropy)
            self.off_probability = predictor.probabilities(
                self.off_confidence.ravel(), self.off_entropy.ravel()
            ).reshape(self.off_confidence.shape)
        self.last_position = max(0, len(self.confidence) - 1)
        self.segment_offset, self.segment_prompt = a["segment_offset"], a["segment_prompt_length"]
        self.segment_budget, self.segment_end = a["segment_budget"], a["segment_end"]
        self.trace_first, self.trace_segments = a["trace_first_segment"], a["trace_segments"]
        # A trace's segments are stored one after the other: its positions are one flat range.
        stored = a["segment_stored"]
        self.trace_start = self.segment_offset[self.trace_first]
        self.trace_stored = np.array(
            [stored[f : f + c].sum() for f, c in zip(self.trace_first, self.trace_segments, strict=True)],
            dtype=np.int64,
        )
        last = self.trace_first + self.trace_segments - 1
        if not np.array_equal(self.segment_offset[last] + stored[last], self.trace_start + self.trace_stored):
            raise ValueError(f"the traces of {traces.source} do not store each trace's segments contiguously")
        weights = self.scenario.prompts.domains
        domains = traces.domains
        self.domain_names = [d for d in dict.fromkeys(domains) if weights.get(d, 0) > 0]
        if not self.domain_names:
            raise ValueError(
                f"the traces hold no domain with a positive weight in scenario '{self.scenario.name}'"
            )
        probabilities = np.array([weights[d] for d in self.domain_names], dtype=float)
        self.domain_probabilities = probabilities / probabilities.sum()
        self.traces_of = [
            np.array([i for i, d in enumerate(domains) if d == name]) for name in self.domain_names
        ]
        observation_space = spaces.Box(FEATURE_LOW, FEATURE_HIGH, (N_FEATURES,), np.float32)
        action_space = make_action_space(self.scenario, predictor)
        self.render_mode = None
        super().__init__(num_envs, observation_space, action_space)
        self.rng = np.random.default_rng(seed)
        self._allocate(num_envs)
        self._actions: np.ndarray | None = None

    # ---- state ---------------------------------------------------------------------------

    def _allocate(self, n: int) -> None:
        self.trace = np.zeros(n, dtype=np.int64)
        self.segment = np.zeros(n, dtype=np.int64)  # global segment index
        self.position = np.zeros(n, dtype=np.int64)
        self.episode_tokens = np.zeros(n, dtype=np.int64)
        self.episode_seconds = np.zeros(n)
        self.episode_return = np.zeros(n)
        self.episode_counts = np.zeros((5, n))  # steps, proposed, accepted, k asked, tau
        self.generated = np.zeros(n, dtype=np.int64)
        self.context_length = np.zeros(n, dtype=np.int64)
        self.steps_since_draft = np.full(n, -1, dtype=np.int64)  # -1: the draft never ran
        self.history = np.zeros((n, 15))  # features 0..14, as FeatureTracker.history
        self.proposing_long = _Rings(n, LONG_WINDOW, 2)  # accepted, proposed
        self.proposing_short = _Rings(n, SHORT_WINDOW, 3)  # accepted, proposed, acceptance probs
        self.rejected = _Rings(n, CONFIDENCE_WINDOW, 1)
        self.accepted = _Rings(n, CONFIDENCE_WINDOW, 2)  # confidence sum, count
        self.timings = _Rings(n, COST_WINDOW, 3)  # draft seconds, draft forwards, verify seconds
        # per episode and position of its trace: the uniform its acceptance is decided by
        self.uniforms = np.zeros((n, max(1, int(self.trace_stored.max(initial=1)))))

    def _start(
        self, rows: np.ndarray, traces: np.ndarray | None = None, seeds: Sequence[int] | None = None
    ) -> None:
        """Begin new episodes in ``rows`` (drawing their traces unless given) and realise their
        acceptance outcomes, from ``seeds`` (one per row, as the single env's reset seed) if given."""
        if traces is None:
            domains = self.rng.choice(len(self.domain_names), size=len(rows), p=self.domain_probabilities)
            traces = np.array(
                [self.traces_of[d][self.rng.integers(len(self.traces_of[d]))] for d in domains],
                dtype=np.int64,
            )
        for i, (row, trace) in enumerate(zip(rows, traces, strict=True)):
            rng = self.rng if seeds is None else np.random.default_rng(seeds[i])
            stored = self.trace_stored[trace]
            self.uniforms[row, :stored] = rng.random(stored)  # TraceReplayEnv's draws, segment by segment
        self.trace[rows] = traces
        self.segment[rows] = self.trace_first[traces]
        self.position[rows] = 0
        self.episode_tokens[rows] = 0
        self.episode_seconds[rows] = 0.0
        self.episode_return[rows] = 0.0
        self.episode_counts[:, rows] = 0.0
        self.generated[rows] = 0
        self.context_length[rows] = self.segment_prompt[self.segment[rows]]
        self.steps_since_draft[rows] = -1
        self.history[rows] = 0.0
        self.history[rows, 14] = 1.0
        for rings in (self.proposing_long, self.proposing_short, self.rejected, self.accepted, self.timings):
            rings.clear(rows)

    def observations(self) -> np.ndarray:
        """(num_envs, N_FEATURES) float32: the feature vectors now."""
        n = self.num_envs
        features = np.empty((n, N_FEATURES))
        features[:, :15] = self.history
        features[:, 15] = self.context_length / self.context_window
        features[:, 16] = self.generated / self.max_new_tokens
        features[:, 17:] = self.constant_features
        return np.clip(features, FEATURE_LOW, FEATURE_HIGH).astype(np.float32)

    # ---- VecEnv ----------------------------------------------------------------------------

    def reset(self) -> np.ndarray:
        if self._seeds[0] is not None:  # VecEnv.seed(s) applies at the next reset, as in SB3
            self.rng = np.random.default_rng(self._seeds[0])
        self._reset_seeds()
        self._start(np.arange(self.num_envs))
        return self.observations()

    def start_traces(self, traces: Sequence[int], seeds: Sequence[int] | None = None) -> np.ndarray:
        """Reset every episode to the given trace indices (evaluation over a trace set). With
        ``seeds``, episode i realises the acceptance outcomes of ``TraceReplayEnv.reset(seed=seeds[i])``."""
        if seeds is not None and len(seeds) != self.num_envs:
            raise ValueError(f"expected one seed per episode ({self.num_envs}), got {len(seeds)}")
        self._start(np.arange(self.num_envs), np.asarray(traces, dtype=np.int64), seeds)
        return self.observations()

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        actions, sizes = self._actions, self.action_space.nvec
        widths = {2, len(sizes)}  # [k, tau_index] means stop index 0
        if (
            actions is None
            or actions.ndim != 2
            or actions.shape[0] != self.num_envs
            or actions.shape[1] not in widths
        ):
            raise ValueError(
                f"expected actions of shape ({self.num_envs}, {len(sizes)}) "
                f"[k, tau_index{', stop_index' if len(sizes) == 3 else ''}], got "
                f"{None if actions is None else actions.shape}"
            )
        actions = actions.astype(np.int64)
        if (actions < 0).any() or (actions >= sizes[: actions.shape[1]]).any():
            raise ValueError(f"actions out of range: each column must lie in 0..{list(sizes - 1)}")
        stop_index = actions[:, 2] if actions.shape[1] == 3 else np.zeros(self.num_envs, dtype=np.int64)
        rewards, dones, infos = self._step(
            actions[:, 0], self.tau_grid[actions[:, 1]], self.stop_grid[stop_index]
        )
        return self.observations(), rewards, dones, infos

    def _replay(self, k: np.ndarray, tau: np.ndarray, stop: np.ndarray) -> ReplayedSteps:
        """``replay_step`` for every episode at once, with the per-token stop thresholds ``stop``."""
        n = self.num_envs
        k_asked = k
        segment, position = self.segment, self.position
        base = self.segment_offset[segment] + position  # flat index of each episode's position
        room = np.minimum(
            self.segment_budget[segment] - position,
            self.context_window - self.segment_prompt[segment] - position,
        )
        k = np.minimum(k, room - 1)
        rejected = np.full(n, -1, dtype=np.int64)
        rows = np.arange(n)
        drafting = k > 0
        forwards = np.zeros(n, dtype=np.int64)
        proposed = np.zeros(n, dtype=np.int64)
        confidence_sum, confidence_min = np.zeros(n), np.full(n, np.inf)
        entropy_sum, probability_sum = np.zeros(n), np.zeros(n)
        accepted_confidence, rejected_confidence = np.zeros(n), np.zeros(n)
        stopped = np.zeros(n, dtype=bool)
        survival = np.ones(n)  # predicted P(every token drafted so far is accepted)
        for i in range(self.k_max):
            drafting &= i < k
            if not drafting.any():
                break
            on = rejected < 0
            flat = np.minimum(base + i, self.last_position)
            row = np.minimum(base + np.maximum(rejected, 0), self.last_position)
            column = np.clip(i - rejected, 0, self.k_max - 1)
            c = np.where(on, self.confidence[flat], self.off_confidence[row, column])
            e = np.where(on, self.entropy[flat], self.off_entropy[row, column])
            forwards += drafting
            confidence_sum += np.where(drafting, c, 0.0)
            entropy_sum += np.where(drafting, e, 0.0)
            confidence_min = np.where(drafting, np.minimum(confidence_min, c), confidence_min)
            if self.predictor is not None:
                survival *= np.where(on, self.on_probability[flat], self.off_probability[row, column])
                cut = drafting & ((c < tau) | (survival < stop))
            else:
                cut = drafting & (c < tau)
            stopped |= cut
            drafting &= ~cut
            uniform = self.uniforms[
                rows, np.minimum(flat - self.trace_start[self.trace], self.uniforms.shape[1] - 1)
            ]
            accept = drafting & on & (uniform < self.accept_prob[flat])
            reject_now = drafting & on & ~accept
            rejected = np.where(reject_now, i, rejected)
            rejected_confidence = np.where(reject_now, c, rejected_confidence)
            accepted_confidence += np.where(accept, c, 0.0)
            row = np.minimum(base + np.maximum(rejected, 0), self.last_position)
            column = np.clip(i - rejected, 0, self.k_max - 1)
            probability = np.where(accept, self.accepted_ap[flat], self.off_ap[row, column])
            probability_sum += np.where(drafting, probability, 0.0)
            proposed += drafting
        accepted = np.where(rejected >= 0, rejected, proposed)
        emitted = np.minimum(accepted + 1, self.segment_end[segment] - position)
        context = self.segment_prompt[segment] + position
        draft_seconds, verify_seconds = self.latency.step_seconds_array(
            context, forwards, proposed, self.context_window
        )
        return ReplayedSteps(
            k_asked,
            tau,
            forwards,
            proposed,
            accepted,
            emitted,
            confidence_sum,
            confidence_min,
            entropy_sum,
            probability_sum,
            accepted_confidence,
            rejected_confidence,
            stopped,
            draft_seconds,
            verify_seconds,
            context,
        )

    def _step(
        self, k: np.ndarray, tau: np.ndarray, stop: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, list[dict[str, Any]]]:
        n = self.num_envs
        segment = self.segment.copy()  # the segment each episode stepped in
        step = self._replay(k, tau, stop)
        emitted, proposed, accepted = step.emitted, step.proposed, step.accepted
        seconds = step.draft_seconds + step.verify_seconds
        rewards = step_reward(emitted, seconds, self.reference_tokens_per_s, self.scale)
        self._update_features(step)
        self.position += emitted
        self.episode_tokens += emitted
        self.episode_seconds += seconds
        self.episode_return += rewards
        self.episode_counts += np.stack([np.ones(n), proposed, accepted, step.k_asked, step.tau])
        # segments and episodes that end
        ended = self.position >= self.segment_end[segment]
        last = self.segment == self.trace_first[self.trace] + self.trace_segments[self.trace] - 1
        moving = ended & ~last
        self.segment[moving] += 1
        self.position[moving] = 0
        self.context_length[moving] = self.segment_prompt[self.segment[moving]]
        dones = ended & last
        infos: list[dict[str, Any]] = [{} for _ in range(n)]
        if dones.any():
            done_rows = np.flatnonzero(dones)
            terminal = self.observations()[done_rows]
            for row, observation in zip(done_rows, terminal, strict=False):
                tokens, secs = int(self.episode_tokens[row]), float(self.episode_seconds[row])
                infos[row] = {
                    "terminal_observation": observation,
                    "episode_tokens": tokens,
                    "episode_seconds": secs,
                    "tokens_per_s": tokens / secs if secs > 0 else 0.0,
                    "episode_return": float(self.episode_return[row]),
                    **dict(
                        zip(
                            ("steps", "proposed", "accepted", "k_sum", "tau_sum"),
                            self.episode_counts[:, row].tolist(),
                            strict=True,
                        )
                    ),
                    "domain": self.trace_set.domains[self.trace[row]],
                    "trace_index": int(self.trace[row]),
                }
            self._start(done_rows)
        return rewards.astype(np.float32), dones, infos

    def _update_features(self, step: ReplayedSteps) -> None:
        """FeatureTracker.update for every episode at once (same definitions, same order)."""
        history = self.history
        self.generated += step.emitted
        self.context_length = step.context + step.emitted
        drafted = step.forwards > 0
        self.steps_since_draft = np.where(
            drafted, 0, np.where(self.steps_since_draft >= 0, self.steps_since_draft + 1, -1)
        )
        safe = np.maximum(step.forwards, 1)
        history[:, 8] = np.where(drafted, step.confidence_sum / safe, history[:, 8])
        history[:, 9] = np.where(drafted, step.confidence_min, history[:, 9])
        history[:, 10] = np.where(drafted, step.entropy_sum / safe / self.log_vocab, history[:, 10])
        proposing = np.flatnonzero(step.proposed > 0)
        if len(proposing):
            self.proposing_long.push(
                proposing, np.stack([step.accepted[proposing], step.proposed[proposing]]).astype(float)
            )
            self.proposing_short.push(
                proposing,
                np.stack(
                    [step.accepted[proposing], step.proposed[proposing], step.probability_sum[proposing]]
                ).astype(float),
            )
            long, short = self.proposing_long.sums[:, proposing], self.proposing_short.sums[:, proposing]
            history[proposing, 0] = _ratio(short[0], short[1])
            history[proposing, 1] = _ratio(long[0], long[1])
            history[proposing, 2] = _ratio(short[2], short[1])
        rejecting = np.flatnonzero(step.accepted < step.proposed)
        if len(rejecting):
            self.rejected.push(rejecting, step.rejected_confidence[rejecting][None])
            history[rejecting, 11] = self.rejected.sums[0, rejecting] / self.rejected.count[rejecting]
        accepting = np.flatnonzero(step.accepted > 0)
        if len(accepting):
            self.accepted.push(
                accepting,
                np.stack([step.accepted_confidence[accepting], step.accepted[accepting].astype(float)]),
            )
            sums = self.accepted.sums[:, accepting]
            history[accepting, 12] = _ratio(sums[0], sums[1])
        self.timings.push(
            np.arange(self.num_envs),
            np.stack(
                [np.where(drafted, step.draft_seconds, 0.0), step.forwards.astype(float), step.verify_seconds]
            ),
        )
        draft_s, draft_n, verify_s = self.timings.sums
        per_verify = _ratio(verify_s, self.timings.count.astype(float))
        history[:, 13] = np.where(
            (draft_n > 0) & (verify_s > 0), _ratio(_ratio(draft_s, draft_n), per_verify), 0.0
        )
        history[:, 3] = step.proposed / K_NORM
        history[:, 4] = step.accepted / K_NORM
        history[:, 5] = step.k_asked / K_NORM
        history[:, 6] = step.tau
        history[:, 7] = step.stopped
        history[:, 14] = np.where(self.steps_since_draft < 0, 1.0, self.steps_since_draft / K_NORM)
