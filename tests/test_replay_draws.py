"""Common random numbers: the vectorised replay realises sampled acceptance exactly as the single
env does for the same seed, so every controller and policy of a comparison sees the same draws."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specrl.controllers import StaticController
from specrl.envs import TraceReplayEnv, VecTraceReplay, collect_traces
from specrl.trace_evaluation import evaluate_controller, evaluate_policy


@pytest.fixture(scope="module")
def sampled(shifted):
    return replace(shifted, sampling=replace(shifted.sampling, temperature=1.0))


@pytest.fixture(scope="module")
def sampled_traces(close_pair, sampled):
    return collect_traces(close_pair, sampled, "train", progress=False)


def test_sampled_vectorised_replay_equals_the_single_env_on_the_same_seeds(sampled, sampled_traces, latency):
    n = len(sampled_traces)
    seeds = [1000 + 17 * i for i in range(n)]
    vec = VecTraceReplay(sampled, sampled_traces, latency, num_envs=n, seed=0)
    singles = [TraceReplayEnv(sampled, traces=sampled_traces, latency=latency) for _ in range(n)]
    vec.start_traces(range(n), seeds=seeds)
    for i, env in enumerate(singles):
        env.reset(seed=seeds[i], options={"trace_index": i})
    rng = np.random.default_rng(2)
    live = np.ones(n, dtype=bool)
    steps = rejections = 0
    while live.any():
        actions = np.stack([np.array([rng.integers(0, 9), rng.integers(0, 3)]) for _ in range(n)])
        vec_observations, vec_rewards, vec_dones, vec_infos = vec.step(actions)
        for i in np.flatnonzero(live):
            observation, reward, done, _, info = singles[i].step(actions[i])
            result = info["step_result"]
            steps += 1
            rejections += result.accepted < result.proposed
            assert bool(vec_dones[i]) == done
            assert vec_rewards[i] == pytest.approx(reward, rel=1e-5, abs=1e-5)
            if done:
                live[i] = False
                assert vec_infos[i]["episode_summary"].tokens == info["episode_tokens"]
                np.testing.assert_allclose(vec_infos[i]["terminal_observation"], observation, atol=1e-5)
            else:
                np.testing.assert_allclose(vec_observations[i], observation, atol=1e-5)
    assert steps > 60 and rejections > 10  # sampled outcomes, both ways


def test_other_seeds_give_other_draws(sampled, sampled_traces, latency):
    """The draws follow the seed (not a fixed realisation): episode tokens per step differ."""
    n = len(sampled_traces)
    totals = []
    for base in (0, 500):
        vec = VecTraceReplay(sampled, sampled_traces, latency, num_envs=n, seed=0)
        vec.start_traces(range(n), seeds=[base + i for i in range(n)])
        steps = np.zeros(n)
        live = np.ones(n, dtype=bool)
        while live.any():
            _, _, dones, _ = vec.step(np.tile([4, 0], (n, 1)))
            steps += live
            live &= ~dones
        totals.append(steps)
    assert not np.array_equal(totals[0], totals[1])
    with pytest.raises(ValueError, match="one seed per episode"):
        VecTraceReplay(sampled, sampled_traces, latency, num_envs=n).start_traces(range(n), seeds=[1])


def test_policy_and_controller_evaluations_share_their_draws(sampled, sampled_traces, latency):
    """A batch policy that always answers [4, 0] scores exactly as StaticController(4) on sampled
    traces: the two evaluation paths see the same acceptance outcomes."""
    policy = evaluate_policy(
        lambda observations: np.tile([4, 0], (len(observations), 1)),
        sampled,
        sampled_traces,
        latency,
        repeats=3,
    )
    controller = evaluate_controller(StaticController(4), sampled, sampled_traces, latency, repeats=3)
    assert policy.tokens == controller.tokens and policy.steps == controller.steps
    assert policy.accepted == controller.accepted and policy.seconds == pytest.approx(controller.seconds)
    other = evaluate_controller(StaticController(4), sampled, sampled_traces, latency, repeats=3, seed=99)
    assert other.accepted != controller.accepted


def test_a_tally_sees_each_live_traces_actions_once(sampled, sampled_traces, latency):
    """``record`` gets the actions of the traces still decoding, so a tally of them counts every
    step the summary counts."""
    seen = []
    summary = evaluate_policy(
        lambda observations: np.tile([3, 0], (len(observations), 1)),
        sampled,
        sampled_traces,
        latency,
        repeats=2,
        record=lambda actions: seen.append(np.array(actions)),
    )
    steps = np.concatenate(seen)
    assert len(steps) == summary.steps and (steps[:, 0] == 3).all()


def test_the_bounds_price_sampled_traces_with_the_sampled_latency(sampled_traces, monkeypatch):
    """best_static and the oracle take the latency view of the traces' own sampling."""
    from specrl.latency import LatencyModel
    from specrl.oracle import best_static, clairvoyant_bound

    model = LatencyModel.from_cost_model()
    assert not sampled_traces.greedy
    calls = []
    original = LatencyModel.for_sampling

    def spy(self, sampling):
        calls.append(None if sampling is None else sampling.temperature)
        return original(self, sampling)

    monkeypatch.setattr(LatencyModel, "for_sampling", spy)
    best_static(sampled_traces, model, (0.0,), count=1)
    clairvoyant_bound(sampled_traces, model, count=1)
    assert calls == [1.0, 1.0]
