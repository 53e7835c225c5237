"""Playing episodes: a controller in any env with its steps recorded, controllers and batch
policies scored on recorded traces in the trace-replay simulator, and controllers scored in the
batch simulator (tokens and seconds by batch size, :class:`EpisodeTally`).

Every evaluation on traces resets trace i of repeat r with :func:`episode_seed`, so a rule
(:func:`evaluate_controller`) and a learned policy stepping all traces at once
(:func:`evaluate_policy`) see the same acceptance draws (common random numbers, docs/design.md
section 4b). Rule tuning, the bounds' comparisons, checkpoint selection, the test comparison of
training and ``specrl evaluate``'s simulator columns all score on traces through these.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from specrl.acceptance import AcceptancePredictor
from specrl.controllers.base import Controller
from specrl.engine.types import throughput
from specrl.envs import EpisodeSummary, Scenario, TraceReplayEnv, run_episode
from specrl.envs.batch_replay import BatchReplayEnv
from specrl.envs.rollout import EPISODE_SUMMARY
from specrl.envs.vec_replay import VecTraceReplay
from specrl.latency import LatencyModel
from specrl.traces import TraceSet


@dataclass(frozen=True)
class StepRecord:
    """The scalars of one env step."""

    tokens: int
    seconds: float
    proposed: int
    accepted: int
    k: int
    tau: float
    domain: str
    position: int  # tokens generated in the episode before this step


@dataclass
class EpisodeRecord:
    """One played episode: its totals and, where they were recorded, its steps."""

    summary: EpisodeSummary
    steps: list[StepRecord] = field(default_factory=list)


class StepRecorder(gym.Wrapper):
    """Keeps the :class:`StepRecord` of every step of the current episode (``self.steps``)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.steps: list[StepRecord] = []

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self.steps = []
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        self.steps.append(
            StepRecord(
                info["tokens"],
                info["seconds"],
                info["proposed"],
                info["accepted"],
                info["k"],
                info["tau"],
                info["domain"],
                info["episode_tokens"] - info["tokens"],
            )
        )
        return observation, reward, terminated, truncated, info


def play(env: gym.Env, controller: Controller, seed: int, options: dict | None = None) -> EpisodeRecord:
    """One episode of ``controller`` in ``env`` (reset with ``seed`` and ``options``), with its
    steps if ``env`` is a :class:`StepRecorder`."""
    summary = run_episode(env, controller, seed=seed, options=options)
    return EpisodeRecord(summary, env.steps if isinstance(env, StepRecorder) else [])


def episode_seed(seed: int, repeat: int, index: int) -> int:
    """The reset seed of trace ``index`` in ``repeat``: one definition for every evaluation."""
    return seed + 7919 * repeat + index


def play_traces(
    controller: Controller,
    scenario: Scenario,
    traces: TraceSet,
    latency: LatencyModel,
    repeats: int = 1,
    seed: int = 0,
    steps: bool = False,
) -> list[EpisodeRecord]:
    """A controller over every trace (``repeats`` acceptance draws each, for sampling; greedy
    traces once), trace i of repeat r reset with :func:`episode_seed`, as :func:`evaluate_policy`
    starts it: both see the same acceptance draws. ``steps``: record every step."""
    env: gym.Env = TraceReplayEnv(scenario, traces=traces, latency=latency)
    if steps:
        env = StepRecorder(env)
    return [
        play(env, controller, episode_seed(seed, repeat, index), {"trace_index": index})
        for repeat in range(1 if traces.greedy else repeats)
        for index in range(len(traces))
    ]


def evaluate_controller(
    controller: Controller,
    scenario: Scenario,
    traces: TraceSet,
    latency: LatencyModel,
    repeats: int = 1,
    seed: int = 0,
) -> EpisodeSummary:
    """The totals of :func:`play_traces`."""
    result = EpisodeSummary()
    for record in play_traces(controller, scenario, traces, latency, repeats, seed):
        result.add(record.summary)
    return result


def evaluate_policy(
    predict: Callable[[np.ndarray], np.ndarray],
    scenario: Scenario,
    traces: TraceSet,
    latency: LatencyModel,
    repeats: int = 1,
    seed: int = 0,
    predictor: AcceptancePredictor | None = None,
    record: Callable[[np.ndarray], None] | None = None,
) -> EpisodeSummary:
    """A batch policy (observations (N, 19) -> actions (N, 2), or (N, 3) with the per-token stop
    dimension, applied with ``predictor``) over every trace at once, on the acceptance draws
    :func:`evaluate_controller` uses for the same ``seed``. ``record``, if given, sees the actions
    of the traces still being decoded at every step."""
    result = EpisodeSummary()
    for repeat in range(1 if traces.greedy else repeats):
        env = VecTraceReplay(scenario, traces, latency, num_envs=len(traces), predictor=predictor)
        seeds = [episode_seed(seed, repeat, index) for index in range(len(traces))]
        observations = env.start_traces(range(len(traces)), seeds=seeds)
        live = np.ones(len(traces), dtype=bool)
        while live.any():
            actions = predict(observations)
            if record is not None:
                record(np.asarray(actions)[live])
            observations, _, dones, infos = env.step(actions)
            for row in np.flatnonzero(dones & live):
                result.add(infos[row][EPISODE_SUMMARY])
            live &= ~dones
    return result


# ---- the batch simulator ----------------------------------------------------------------------


@dataclass
class EpisodeTally:
    """One episode's tokens and seconds by batch size (key 0: over all), and the steps at each
    (batch size, k)."""

    tokens: dict[int, float] = field(default_factory=dict)
    seconds: dict[int, float] = field(default_factory=dict)
    steps: Counter = field(default_factory=Counter)

    @property
    def throughput(self) -> float:
        """Tokens over seconds, over the whole episode."""
        return throughput(self.tokens[0], self.seconds[0])


def play_episode(env: BatchReplayEnv, controller, seed: int, prefill: bool = True) -> EpisodeTally:
    """``controller``'s episode with ``seed``; the seconds of the steps alone if not ``prefill``."""
    tally = EpisodeTally()
    observation, _ = env.reset(seed=seed)
    controller.reset()
    done = False
    while not done:
        observation, _, done, _, info = env.step(controller.act(observation))
        controller.observe(info["step_result"])
        spent = info["seconds"] - (0.0 if prefill else info["prefill_seconds"])
        for size in (0, info["batch_size"]):
            tally.tokens[size] = tally.tokens.get(size, 0.0) + info["tokens"]
            tally.seconds[size] = tally.seconds.get(size, 0.0) + spent
        tally.steps[(info["batch_size"], info["k"])] += 1
    return tally


def play_episodes(env: BatchReplayEnv, controller, episodes: int, prefill: bool = True) -> list[EpisodeTally]:
    """The episodes with seeds 0..episodes-1, each tallied on its own: each episode's throughput
    pairs controllers episode by episode
    (:func:`specrl.evaluation.intervals.paired_ratio_interval`);
    pooled, they give :func:`controller_throughput`."""
    return [play_episode(env, controller, seed, prefill) for seed in range(episodes)]


def pooled_throughput(tallies: list[EpisodeTally]) -> float:
    """Tokens over busy seconds over every episode of ``tallies``."""
    return throughput(sum(t.tokens[0] for t in tallies), sum(t.seconds[0] for t in tallies))


def rates_by_batch(env: BatchReplayEnv, controller, episodes: int, prefill: bool = True) -> dict[int, float]:
    """Tokens over seconds at each batch size a controller's episodes met (key 0: over all); the
    seconds of the steps alone if not ``prefill``."""
    tokens: dict[int, float] = {}
    seconds: dict[int, float] = {}
    for tally in play_episodes(env, controller, episodes, prefill):
        for size, value in tally.tokens.items():
            tokens[size] = tokens.get(size, 0.0) + value
            seconds[size] = seconds.get(size, 0.0) + tally.seconds[size]
    return {size: throughput(tokens[size], seconds[size]) for size in tokens}


def controller_throughput(env: BatchReplayEnv, controller, episodes: int) -> float:
    """Tokens over busy seconds, summed over episodes with seeds 0..episodes-1."""
    return rates_by_batch(env, controller, episodes)[0]
