"""The real loop as one SB3 VecEnv, for PPO on real decoding: many :class:`SpecDecodeEnv`, each in
its own process (SB3's ``SubprocVecEnv``, each process loading the pair once) or all in this one. The
trace-replay simulator is the default (``specrl train``); the real loop is for what it does not
model (wall-clock time on the target hardware).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import gymnasium as gym
import torch
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv, VecEnv

from specrl.acceptance import AcceptancePredictor
from specrl.envs.rollout import EPISODE_SUMMARY, EpisodeSummary
from specrl.envs.scenario import Scenario
from specrl.envs.spec_decode import SpecDecodeEnv
from specrl.latency import LatencyModel


class EpisodeTotals(gym.Wrapper):
    """Adds the episode's :class:`EpisodeSummary` to the info of its last step (``episode_summary``),
    as :class:`VecTraceReplay`'s rows report it, so the same training callbacks read both."""

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        observation, info = self.env.reset(**kwargs)
        self.summary = EpisodeSummary(domain=info["domain"], prompt_index=info["prompt_index"])
        return observation, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.summary.add_step(info, float(reward))
        if terminated or truncated:
            info = {**info, EPISODE_SUMMARY: self.summary}
        return observation, reward, terminated, truncated, info


def make_real_env(
    scenario: Scenario,
    split: str,
    latency: LatencyModel | None,
    predictor: AcceptancePredictor | None,
    threads: int | None = None,
) -> gym.Env:
    """One real-loop env (it loads the scenario's pair: once per process), its process held to
    ``threads`` torch threads if given."""
    if threads is not None:
        torch.set_num_threads(threads)
    return EpisodeTotals(SpecDecodeEnv(scenario, split=split, latency=latency, predictor=predictor))


def real_loop_vec_env(
    scenarios: Sequence[Scenario],
    envs_per_scenario: Sequence[int],
    latency: LatencyModel | None,
    *,
    split: str = "train",
    predictor: AcceptancePredictor | None = None,
    subprocesses: bool = True,
) -> VecEnv:
    """``envs_per_scenario[i]`` real-loop envs of ``scenarios[i]``, in order, on ``split``'s prompts;
    in a ``SubprocVecEnv`` (one process each, each with this process's torch threads: as many
    processes each on every core would oversubscribe them, and a forward's float sums depend on
    its threads) or, without ``subprocesses``, a ``DummyVecEnv``."""
    threads = torch.get_num_threads() if subprocesses else None
    makers: list[Callable[[], gym.Env]] = [
        partial(make_real_env, scenario, split, latency, predictor, threads)
        for scenario, count in zip(scenarios, envs_per_scenario, strict=True)
        for _ in range(count)
    ]
    return SubprocVecEnv(makers) if subprocesses else DummyVecEnv(makers)
