"""``VecTraceReplay``: many :class:`~specrl.envs.TraceReplayEnv` episodes as one SB3 VecEnv.

Every row is a ``TraceReplayEnv``, stepped in this process, so the vectorised env and the single
env cannot disagree (replay, features, reward and acceptance draws are the single env's). An
episode started with a seed (:meth:`VecTraceReplay.start_traces`) is ``TraceReplayEnv.reset(seed=...)``
itself, so controllers evaluated on the same seeds share their random draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from specrl.acceptance import AcceptancePredictor
from specrl.envs.rollout import EPISODE_SUMMARY, EpisodeSummary
from specrl.envs.scenario import Scenario
from specrl.envs.trace_replay import TraceReplayEnv
from specrl.latency import LatencyModel
from specrl.traces import TraceSet


class SubEnvVecEnv(VecEnv):
    """A VecEnv over gymnasium envs that live in this process, with SB3's contract for
    attributes and methods: ``get_attr``, ``set_attr``, ``env_method`` and ``env_is_wrapped``
    act on the sub-envs chosen by ``indices`` (as ``DummyVecEnv``; without its deep copy of
    every step's infos, which would cost more than the replay itself)."""

    envs: list[gym.Env]

    def step_async(self, actions: np.ndarray) -> None:
        self._actions = np.asarray(actions)

    def close(self) -> None:
        for env in self.envs:
            env.close()

    def _chosen(self, indices: Any) -> list[gym.Env]:
        return [self.envs[i] for i in self._get_indices(indices)]

    def get_attr(self, attr_name: str, indices: Any = None) -> list[Any]:
        return [getattr(env.unwrapped, attr_name) for env in self._chosen(indices)]

    def set_attr(self, attr_name: str, value: Any, indices: Any = None) -> None:
        for env in self._chosen(indices):
            setattr(env.unwrapped, attr_name, value)

    def env_method(
        self, method_name: str, *method_args: Any, indices: Any = None, **method_kwargs: Any
    ) -> list[Any]:
        return [getattr(env, method_name)(*method_args, **method_kwargs) for env in self._chosen(indices)]

    def env_is_wrapped(self, wrapper_class: type[gym.Wrapper], indices: Any = None) -> list[bool]:
        return [isinstance(env, wrapper_class) for env in self._chosen(indices)]


class VecTraceReplay(SubEnvVecEnv):
    """``num_envs`` trace-replay episodes of one scenario, reset automatically when they end.

    Spaces, reward and episode logic are those of :class:`~specrl.envs.TraceReplayEnv` (each row
    is one). The ``info`` of an episode that ends holds ``terminal_observation`` (SB3's
    convention), ``episode_summary`` (its :class:`~specrl.envs.rollout.EpisodeSummary`: tokens,
    seconds, steps, counts, the actions' sums, the return, the domain) and ``trace_index``;
    other infos are empty.

    ``seed`` seeds row i with ``seed + i`` at the first reset (``VecEnv.seed`` semantics).

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
        self.envs = [
            TraceReplayEnv(scenario, traces=traces, latency=latency, predictor=predictor)
            for _ in range(num_envs)
        ]
        first = self.envs[0]
        self.scenario, self.trace_set, self.latency = first.scenario, first.traces, first.latency
        self.reference_tokens_per_s = first.reference_tokens_per_s
        self.render_mode = None
        super().__init__(num_envs, first.observation_space, first.action_space)
        if seed is not None:
            self.seed(seed)
        self._actions: np.ndarray | None = None
        self._totals = self._new_totals()  # per row: the episode so far

    # ---- episodes ------------------------------------------------------------------------------

    def reset(self) -> np.ndarray:
        observations = [
            env.reset(seed=seed, options=options)[0]
            for env, seed, options in zip(self.envs, self._seeds, self._options, strict=True)
        ]
        self._reset_seeds()
        self._reset_options()
        self._totals = self._new_totals()
        return np.stack(observations)

    def start_traces(self, traces: Sequence[int], seeds: Sequence[int] | None = None) -> np.ndarray:
        """Reset episode i to trace ``traces[i]`` (evaluation over a trace set), with
        ``TraceReplayEnv.reset(seed=seeds[i])``'s acceptance draws when ``seeds`` are given."""
        if seeds is not None and len(seeds) != self.num_envs:
            raise ValueError(f"expected one seed per episode ({self.num_envs}), got {len(seeds)}")
        if len(traces) != self.num_envs:
            raise ValueError(f"expected one trace index per episode ({self.num_envs}), got {len(traces)}")
        seeds = [None] * self.num_envs if seeds is None else seeds
        observations = [
            env.reset(seed=None if seed is None else int(seed), options={"trace_index": int(trace)})[0]
            for env, trace, seed in zip(self.envs, traces, seeds, strict=True)
        ]
        self._totals = self._new_totals()
        return np.stack(observations)

    # ---- VecEnv ----------------------------------------------------------------------------

    def step_wait(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict[str, Any]]]:
        observations, infos = [], []
        rewards = np.zeros(self.num_envs, dtype=np.float32)
        dones = np.zeros(self.num_envs, dtype=bool)
        # each row's env checks its action (InvalidActionError)
        for row, (env, action) in enumerate(zip(self.envs, self._actions, strict=True)):
            observation, reward, terminated, truncated, info = env.step(action)
            self._totals[row].add_step(info, reward)
            rewards[row] = reward
            ended = {}
            if terminated or truncated:
                dones[row] = True
                ended = self._episode_info(env, row, observation)
                observation, _ = env.reset()
            observations.append(observation)
            infos.append(ended)
        return np.stack(observations), rewards, dones, infos

    def _episode_info(self, env: TraceReplayEnv, row: int, observation: np.ndarray) -> dict[str, Any]:
        """The info of a row whose episode just ended (and a fresh summary for its next one)."""
        summary, self._totals[row] = self._totals[row], EpisodeSummary()
        summary.domain, summary.prompt_index = env.trace.domain, env.trace.prompt_index
        return {
            "terminal_observation": observation,
            EPISODE_SUMMARY: summary,
            "trace_index": env.trace_index,
        }

    def _new_totals(self) -> list[EpisodeSummary]:
        return [EpisodeSummary() for _ in range(self.num_envs)]
