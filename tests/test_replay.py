"""Traces and the trace-replay envs: exact greedy replay, sampled replay in law, the numpy
vectorised env against the single env, the file format."""

from __future__ import annotations

import json

import gymnasium
import numpy as np
import pytest
from conftest import scenario, step_outcome
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import specrl
from specrl.envs import (
    TRACE_REPLAY_ID,
    InvalidActionError,
    SpecDecodeEnv,
    TraceReplayEnv,
    VecTraceReplay,
    collect_traces,
)
from specrl.features import CONFIDENCE_WINDOW, COST_WINDOW, LONG_WINDOW
from specrl.traces import TRACE_FORMAT_VERSION, TraceError, TraceSet


def random_actions(rng: np.random.Generator, n: int, k_max: int = 8, n_tau: int = 10) -> list[np.ndarray]:
    return [np.array([rng.integers(0, k_max + 1), rng.integers(0, n_tau)]) for _ in range(n)]


def test_traces_have_partial_acceptance_and_both_segments(greedy_traces):
    assert len(greedy_traces) == 8 and greedy_traces.greedy
    accept = greedy_traces.arrays["accept_prob"]
    assert set(np.unique(accept)) == {0.0, 1.0} and 0.2 < accept.mean() < 0.9
    assert all(len(t.segments) == 2 for t in greedy_traces.traces)  # every episode shifted to math
    assert all(t.segments[0].end == 10 and t.tokens == 24 for t in greedy_traces.traces)


def test_greedy_replay_equals_the_real_env_step_by_step(close_pair, shifted, greedy_traces, latency):
    real = SpecDecodeEnv(shifted, pair=close_pair, split="test", latency=latency)
    sim = TraceReplayEnv(shifted, traces=greedy_traces, latency=latency)
    rng = np.random.default_rng(0)
    steps = 0
    for index, trace in enumerate(greedy_traces.traces):
        real_observation, _ = real.reset(
            seed=trace.seed, options={"domain": trace.domain, "prompt_index": trace.prompt_index}
        )
        sim_observation, _ = sim.reset(seed=1, options={"trace_index": index})
        np.testing.assert_array_equal(real_observation, sim_observation)
        done = False
        while not done:
            action = random_actions(rng, 1)[0]
            real_observation, real_reward, done, _, real_info = real.step(action)
            sim_observation, sim_reward, sim_done, _, sim_info = sim.step(action)
            assert step_outcome(sim_info["step_result"]) == step_outcome(real_info["step_result"])
            assert sim_info["step_result"].confidences == pytest.approx(
                real_info["step_result"].confidences, abs=1e-5
            )
            np.testing.assert_allclose(sim_observation, real_observation, atol=1e-5)
            assert sim_reward == pytest.approx(real_reward) and sim_done == done
            assert sim_info["domain"] == real_info["domain"] and sim_info["segment"] == real_info["segment"]
            steps += 1
    assert steps > 60


@pytest.mark.slow
def test_long_greedy_replay_equals_the_real_env_with_every_feature_window_full(
    close_pair, prompt_file, latency
):
    """Episodes of 110 tokens with small k: more proposing steps than the longest feature window
    (LONG_WINDOW), so every window statistic is compared after it has filled and started to evict."""
    long = scenario(prompt_file, max_new_tokens=110)
    traces = collect_traces(close_pair, long, "validation", progress=False)
    real = SpecDecodeEnv(long, pair=close_pair, split="validation", latency=latency)
    sim = TraceReplayEnv(long, traces=traces, latency=latency)
    rng = np.random.default_rng(3)
    full = []
    for index, trace in enumerate(traces.traces):
        real.reset(seed=trace.seed, options={"domain": trace.domain, "prompt_index": trace.prompt_index})
        sim.reset(seed=1, options={"trace_index": index})
        done = False
        while not done:
            action = np.array([rng.integers(1, 3), rng.integers(0, 2)])
            real_observation, real_reward, done, _, real_info = real.step(action)
            sim_observation, sim_reward, sim_done, _, sim_info = sim.step(action)
            assert step_outcome(sim_info["step_result"]) == step_outcome(real_info["step_result"])
            np.testing.assert_allclose(sim_observation, real_observation, atol=1e-5)
            assert sim_reward == pytest.approx(real_reward) and sim_done == done
        tracker = sim.features
        full.append(
            len(tracker.proposing_proposed) == LONG_WINDOW
            and len(tracker.rejected_confidences) == CONFIDENCE_WINDOW
            and len(tracker.draft_seconds) == COST_WINDOW
        )
    assert sum(full) >= len(full) // 2, f"too few episodes filled every window: {full}"


@pytest.mark.slow
def test_long_sampled_replay_matches_the_real_env_in_law_with_full_windows(close_pair, prompt_file, latency):
    """Temperature 1, 110-token episodes, static k = 2: the window features at the end of an
    episode (the long window full) and the episode's acceptance rate, real env vs replay, each
    over 16 independently sampled episodes; means within 4 standard errors."""
    sampled = scenario(prompt_file, temperature=1.0, max_new_tokens=110, stop_at_eos=False)
    traces = TraceSet.concatenate(
        [collect_traces(close_pair, sampled, "train", seed=s, progress=False) for s in (10, 20)]
    )
    real = SpecDecodeEnv(sampled, pair=close_pair, split="train", latency=latency)
    sim = TraceReplayEnv(sampled, traces=traces, latency=latency)

    def final_statistics(env, episodes) -> np.ndarray:
        rows = []
        for episode in episodes:
            env.reset(**episode)
            done, proposed, accepted = False, 0, 0
            while not done:
                observation, _, done, _, info = env.step(np.array([2, 0]))
                proposed += info["proposed"]
                accepted += info["accepted"]
            assert len(env.features.proposing_proposed) == LONG_WINDOW
            rows.append([*observation[:3], accepted / proposed])
        return np.array(rows)

    real_rows = final_statistics(real, [{"seed": 500 + i} for i in range(16)])
    sim_rows = final_statistics(sim, [{"seed": i, "options": {"trace_index": i}} for i in range(len(traces))])
    error = np.sqrt(
        real_rows.var(axis=0, ddof=1) / len(real_rows) + sim_rows.var(axis=0, ddof=1) / len(sim_rows)
    )
    difference = np.abs(real_rows.mean(axis=0) - sim_rows.mean(axis=0))
    assert (difference < 4 * error).all(), (real_rows.mean(axis=0), sim_rows.mean(axis=0), error)
    assert (real_rows[:, 3].std() > 0) and (0.1 < real_rows[:, 3].mean() < 0.95)  # sampled, partial


@pytest.mark.slow
def test_sampled_replay_matches_the_real_acceptance_per_draft_position(close_pair, prompt_file, latency):
    """Static k = 3 at temperature 1: P(accept | proposed) at draft positions 1..3, real env vs
    replay, each over 40 independently sampled episodes; within 4 standard errors."""
    sampled = scenario(prompt_file, temperature=1.0, max_new_tokens=16)
    traces = collect_traces(close_pair, sampled, "train", seed=100, progress=False)
    traces = TraceSet.concatenate(
        [traces]
        + [collect_traces(close_pair, sampled, "train", seed=s, progress=False) for s in (200, 300, 400)]
    )
    real = SpecDecodeEnv(sampled, pair=close_pair, split="train", latency=latency)
    sim = TraceReplayEnv(sampled, traces=traces, latency=latency)

    def acceptance(env, episodes):
        counts = np.zeros((2, 3))  # proposed, accepted per draft position
        for episode in episodes:
            env.reset(**episode)
            done = False
            while not done:
                _, _, done, _, info = env.step(np.array([3, 0]))
                result = info["step_result"]
                counts[0, : result.proposed] += 1
                counts[1, : result.accepted] += 1
        return counts

    real_counts = acceptance(real, [{"seed": 1000 + i} for i in range(40)])
    sim_counts = acceptance(sim, [{"seed": i, "options": {"trace_index": i}} for i in range(len(traces))])
    for (real_n, real_a), (sim_n, sim_a) in zip(real_counts.T, sim_counts.T, strict=False):
        p_real, p_sim = real_a / real_n, sim_a / sim_n
        pooled = (real_a + sim_a) / (real_n + sim_n)
        error = np.sqrt(pooled * (1 - pooled) * (1 / real_n + 1 / sim_n))
        assert 0.05 < pooled < 0.95 and abs(p_real - p_sim) < 4 * error, (p_real, p_sim, error)


def test_vectorised_replay_equals_the_single_env(shifted, greedy_traces, latency):
    n = len(greedy_traces)
    vec = VecTraceReplay(shifted, greedy_traces, latency, num_envs=n, seed=0)
    singles = [TraceReplayEnv(shifted, traces=greedy_traces, latency=latency) for _ in range(n)]
    observations = vec.start_traces(range(n))
    expected = np.stack([env.reset(seed=0, options={"trace_index": i})[0] for i, env in enumerate(singles)])
    np.testing.assert_allclose(observations, expected, atol=1e-6)
    rng = np.random.default_rng(1)
    live = np.ones(n, dtype=bool)
    returns = np.zeros((2, n))
    while live.any():
        actions = np.stack(random_actions(rng, n))
        vec_observations, vec_rewards, vec_dones, vec_infos = vec.step(actions)
        for i in np.flatnonzero(live):
            observation, reward, done, _, info = singles[i].step(actions[i])
            returns[:, i] += (vec_rewards[i], reward)
            assert bool(vec_dones[i]) == done
            if done:
                live[i] = False
                np.testing.assert_allclose(vec_infos[i]["terminal_observation"], observation, atol=1e-5)
                summary = vec_infos[i]["episode_summary"]
                assert summary.tokens == info["episode_tokens"] and summary.steps > 0
                assert summary.seconds == pytest.approx(info["episode_seconds"])
                assert summary.domain == singles[i].trace.domain
            else:
                np.testing.assert_allclose(vec_observations[i], observation, atol=1e-5)
                assert vec_rewards[i] == pytest.approx(reward, rel=1e-5, abs=1e-5)
    np.testing.assert_allclose(returns[0], returns[1], rtol=1e-4)


def test_vectorised_env_resets_finished_episodes_and_refuses_bad_actions(shifted, greedy_traces, latency):
    vec = VecTraceReplay(shifted, greedy_traces, latency, num_envs=16, seed=3)
    vec.seed(7)
    first = vec.reset()
    assert first.shape == (16, specrl.features.N_FEATURES) and first.dtype == np.float32
    finished = 0
    for _ in range(60):
        observations, rewards, dones, infos = vec.step(np.tile([1, 0], (16, 1)))
        assert ((observations >= 0) & (observations <= 1)).all()
        for done, info in zip(dones, infos, strict=False):
            if done:
                finished += 1
                summary = info["episode_summary"]
                assert summary.tokens == 24 and summary.tokens_per_s > 0 and summary.steps >= 24 / 9
    assert finished >= 16
    with pytest.raises(ValueError, match=r"invalid action .* 0 <= k <= 8"):  # each row's env checks it
        vec.step(np.tile([9, 0], (16, 1)))


def test_vectorised_env_keeps_sb3s_contract_for_attributes_and_methods(shifted, greedy_traces, latency):
    """get_attr, set_attr, env_method and env_is_wrapped act on each chosen sub-env (SB3's
    VecEnv contract), not once on the whole object."""
    vec = VecTraceReplay(shifted, greedy_traces, latency, num_envs=4, seed=0)
    vec.reset()
    assert vec.get_attr("trace_index") == [env.trace_index for env in vec.envs]
    vec.set_attr("served", 3, indices=[1, 2])
    assert vec.get_attr("served") == [0, 3, 3, 0]
    results = vec.env_method("reset", indices=[0, 3], options={"trace_index": 5})
    assert len(results) == 2 and vec.get_attr("trace_index", indices=[0, 3]) == [5, 5]
    assert vec.env_is_wrapped(gymnasium.Wrapper) == [False] * 4
    calls = []
    vec.envs[2].close = lambda: calls.append(2)
    vec.close()
    assert calls == [2]


def test_trace_replay_env_passes_the_checkers_and_is_registered(shifted, greedy_traces, latency):
    env = TraceReplayEnv(shifted, traces=greedy_traces, latency=latency)
    gymnasium_check_env(env, skip_render_check=True)
    sb3_check_env(env, warn=True)
    made = gymnasium.make(TRACE_REPLAY_ID, scenario=shifted, traces=greedy_traces, latency=latency)
    observation, _ = made.reset(seed=0)
    assert made.observation_space.contains(observation)
    with pytest.raises(InvalidActionError, match="MultiDiscrete"):
        env.step(np.array([9, 0]))


def test_seeded_replay_is_reproducible(prompt_file, close_pair, latency):
    sampled = scenario(prompt_file, temperature=1.0, max_new_tokens=12)
    traces = collect_traces(close_pair, sampled, "train", progress=False)
    env = TraceReplayEnv(sampled, traces=traces, latency=latency)

    def run(seed):
        env.reset(seed=seed)
        done, rewards = False, []
        while not done:
            _, reward, done, _, _ = env.step(np.array([4, 0]))
            rewards.append(reward)
        return rewards

    assert run(5) == run(5)
    assert any(run(5) != run(s) for s in range(6, 12))


# ---- the file format --------------------------------------------------------------------


def test_trace_files_round_trip(greedy_traces, tmp_path):
    path = greedy_traces.save(tmp_path / "t.npz")
    loaded = TraceSet.load(path)
    assert loaded.meta["format_version"] == TRACE_FORMAT_VERSION and len(loaded) == len(greedy_traces)
    for name, array in greedy_traces.arrays.items():
        np.testing.assert_array_equal(loaded.arrays[name], array)


def rewrite(path, tmp_path, change):
    with np.load(path) as archive:
        contents = {name: archive[name] for name in archive.files}
    change(contents)
    out = tmp_path / "changed.npz"
    np.savez(out, **contents)
    return out


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda c: c.update(
                meta=np.array(json.dumps({**json.loads(str(c["meta"])), "format_version": 99}))
            ),
            "format version 99",
        ),
        (lambda c: c.pop("off_ap"), "no field 'off_ap'"),
        (lambda c: c.update(confidence=c["confidence"][:-1]), "field 'confidence' has shape"),
        (lambda c: c.update(tokens=c["tokens"].astype(np.float32)), "field 'tokens' has dtype"),
        (lambda c: c.update(meta=np.array(json.dumps({"pair": "x"}))), "lacks metadata"),
    ],
)
def test_trace_files_with_a_wrong_version_or_missing_fields_are_refused(
    greedy_traces, tmp_path, change, message
):
    path = greedy_traces.save(tmp_path / "t.npz")
    with pytest.raises(TraceError, match=message):
        TraceSet.load(rewrite(path, tmp_path, change))


def test_missing_or_corrupt_trace_files_are_refused(tmp_path):
    with pytest.raises(TraceError, match="does not exist.*specrl collect"):
        TraceSet.load(tmp_path / "nope.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(TraceError, match="not a readable"):
        TraceSet.load(tmp_path / "bad.npz")


def test_traces_of_another_scenario_are_refused(greedy_traces, prompt_file, latency):
    with pytest.raises(TraceError, match="temperature"):
        TraceReplayEnv(scenario(prompt_file, temperature=1.0), traces=greedy_traces, latency=latency)
