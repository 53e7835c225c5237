"""The bounds: the clairvoyant DP is optimal and never beaten; best static is the grid's best."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from conftest import scenario
from test_replay import random_actions

from specrl.controllers import StaticController, TCPController
from specrl.envs import TraceReplayEnv, collect_traces, run_episode
from specrl.envs.replay import replay_step
from specrl.oracle import best_static, clairvoyant, clairvoyant_bound, realisations
from specrl.traces import Segment, Trace


def hand_segment(accepts: list[bool], confidence: float = 0.9) -> Segment:
    n, k_max = len(accepts), 3
    return Segment(
        prompt_length=4,
        budget=n,
        end=n,
        eos=False,
        tokens=list(range(n)),
        confidence=[confidence] * n,
        entropy=[0.1] * n,
        accept_prob=[float(a) for a in accepts],
        accepted_ap=[1.0] * n,
        off_confidence=[[confidence] * k_max for _ in range(n)],
        off_entropy=[[0.1] * k_max for _ in range(n)],
        off_ap=[[0.0] * k_max for _ in range(n)],
    )


def brute_force(segment: Segment, accepts: list[bool], latency, k_max: int) -> float:
    """Every sequence of k choices, enumerated."""
    best = float("inf")
    for ks in itertools.product(range(k_max + 1), repeat=segment.end):
        position, seconds = 0, 0.0
        for k in ks:
            if position >= segment.end:
                break
            step = replay_step(segment, position, k, 0.0, accepts, 1024)
            draft, verify = latency.step_seconds(
                segment.prompt_length + position, len(step.confidences), step.proposed
            )
            seconds += draft + verify
            position += step.emitted
        if position >= segment.end:
            best = min(best, seconds)
    return best


@pytest.mark.parametrize(
    "pattern", [[1, 1, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 1], [1, 0, 1, 0, 1, 1]]
)
def test_the_dp_equals_brute_force_on_hand_made_segments(latency, pattern):
    accepts = [bool(a) for a in pattern]
    segment = hand_segment(accepts)
    bound = clairvoyant(Trace("x", 0, 0, [segment]), [{"draft": accepts}], latency, 3, 1024)
    assert bound.tokens == 6
    assert bound.seconds == pytest.approx(brute_force(segment, accepts, latency, 3))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_no_controller_beats_the_clairvoyant_optimum(close_pair, prompt_file, shifted, latency, temperature):
    the_scenario = shifted if temperature == 0 else scenario(prompt_file, temperature=1.0)
    traces = collect_traces(close_pair, the_scenario, "test", progress=False)
    env = TraceReplayEnv(the_scenario, traces=traces, latency=latency)
    window = int(traces.meta["context_window"])
    rng = np.random.default_rng(0)

    class Random:
        def reset(self):
            pass

        def act(self, observation):
            return random_actions(rng, 1)[0]

        def observe(self, result):
            pass

    controllers = [Random(), Random(), StaticController(2), StaticController(6, 0.3), TCPController()]
    for index, trace in enumerate(traces.traces):
        seed = 10 + index
        # the env draws the acceptance realisation from np_random seeded like realisations()
        bound = clairvoyant(trace, realisations(trace, 1, seed)[0], latency, traces.k_max, window)
        for controller in controllers:
            summary = run_episode(env, controller, seed=seed, options={"trace_index": index})
            assert summary.tokens == bound.tokens
            assert summary.seconds >= bound.seconds - 1e-12


def test_best_static_is_the_best_of_an_exhaustive_search_in_the_env(shifted, greedy_traces, latency):
    grid = (0.0, 0.5)
    bound = best_static(greedy_traces, latency, grid)
    env = TraceReplayEnv(shifted, traces=greedy_traces, latency=latency)
    measured = {}
    for k, tau in itertools.product(range(greedy_traces.k_max + 1), grid):
        if k == 0 and tau > 0:
            continue
        runs = [
            run_episode(env, StaticController(k, tau), seed=0, options={"trace_index": i})
            for i in range(len(greedy_traces))
        ]
        measured[(k, tau, "draft")] = sum(r.tokens for r in runs) / sum(r.seconds for r in runs)
    assert bound.table == pytest.approx(measured)
    assert (bound.k, bound.tau, bound.drafter) == max(measured, key=measured.get)
    assert bound.tokens_per_s == pytest.approx(max(measured.values()))
    assert clairvoyant_bound(greedy_traces, latency).tokens_per_s >= bound.tokens_per_s
