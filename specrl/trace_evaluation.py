"""Controllers and batch policies scored on recorded traces in the trace-replay simulator.

Every evaluation of a comparison resets trace i of repeat r with :func:`episode_seed`, so a rule
(:func:`evaluate_controller`) and a learned policy stepping all traces at once
(:func:`evaluate_policy`) see the same acceptance draws (common random numbers, docs/design.md
section 4b). Rule tuning (:mod:`specrl.rule_tuning`), checkpoint selection and the test comparison
of training (:mod:`specrl.training`) use these two, and nothing else, to score on traces.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from specrl.acceptance import AcceptancePredictor
from specrl.controllers.base import Controller
from specrl.envs import EpisodeSummary, Scenario, TraceReplayEnv, run_episode
from specrl.envs.rollout import EPISODE_SUMMARY
from specrl.envs.vec_replay import VecTraceReplay
from specrl.latency import LatencyModel
from specrl.traces import TraceSet


def episode_seed(seed: int, repeat: int, index: int) -> int:
    """The reset seed of trace ``index`` in ``repeat``: one definition for every evaluation."""
    return seed + 7919 * repeat + index


def evaluate_controller(
    controller: Controller,
    scenario: Scenario,
    traces: TraceSet,
    latency: LatencyModel,
    repeats: int = 1,
    seed: int = 0,
) -> EpisodeSummary:
    """A controller over every trace (``repeats`` acceptance draws each, for sampling). Trace i of
    repeat r is reset with seed :func:`episode_seed`, as :func:`evaluate_policy` starts it: both
    see the same acceptance draws (common random numbers)."""
    env = TraceReplayEnv(scenario, traces=traces, latency=latency)
    result = EpisodeSummary()
    for repeat in range(1 if traces.greedy else repeats):
        for index in range(len(traces)):
            result.add(
                run_episode(
                    env, controller, seed=episode_seed(seed, repeat, index), options={"trace_index": index}
                )
            )
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
