"""The drafter pool in the simulator: traces of every drafter, exact greedy replay of a drafter
chosen each step, sampled replay in law, the latency model's prices, the bounds over drafters,
the action's drafter index and a policy that uses it."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import scenario, step_outcome

from specrl.controllers import StaticController
from specrl.engine.drafters import DRAFTERS
from specrl.engine.types import Action
from specrl.envs import (
    InvalidActionError,
    SpecDecodeEnv,
    TraceReplayEnv,
    VecTraceReplay,
    collect_traces,
    run_episode,
)
from specrl.envs.actions import to_engine_action
from specrl.envs.scenario import DomainShift, Scenario, ScenarioError
from specrl.envs.trace_store import cache_key, pool_names
from specrl.features import FEATURE_VERSION
from specrl.latency import LatencyError, LatencyModel, measure_drafter_costs
from specrl.oracle import best_static, clairvoyant, clairvoyant_bound, realisations
from specrl.traces import TraceError, TraceSet
from specrl.traces.format import LookupFields, ModelFields

POOL = DRAFTERS  # every drafter: draft, draft-mid, draft-int8, draft-int4, ngram, cascade


@pytest.fixture(scope="module")
def pool_scenario(prompt_file) -> Scenario:
    return scenario(prompt_file, shift=(DomainShift(10, "math"),), drafters=POOL)


@pytest.fixture(scope="module")
def pool_traces(close_pool_pair, pool_scenario) -> TraceSet:
    return collect_traces(close_pool_pair, pool_scenario, "test", progress=False)


def pool_actions(rng: np.random.Generator, n: int) -> list[np.ndarray]:
    return [np.array([rng.integers(0, 9), rng.integers(0, 10), rng.integers(0, len(POOL))]) for _ in range(n)]


def test_pool_traces_store_each_drafter_and_its_lookups(pool_traces):
    assert pool_traces.drafters == POOL
    assert pool_traces.stored_drafters() == ["draft-mid", "draft-int8", "draft-int4", "ngram"]
    segment = pool_traces.traces[0].segments[0]
    assert segment.fields("draft") is segment
    assert isinstance(segment.fields("draft-mid"), ModelFields)
    assert segment.fields("cascade") is segment.fields("draft-mid")  # the cascade replays its mid
    lookup = segment.fields("ngram")
    assert isinstance(lookup, LookupFields)
    every = [s.fields("ngram") for t in pool_traces.traces for s in t.segments]
    matches = [m for f in every for m in f.match]
    available = [a for f in every for a in f.available]
    assert max(available) > 0 and max(matches) > 0 and min(matches) == 0  # found, accepted, rejected
    for fields in every:  # what a lookup matches it found
        assert all(m <= a for m, a in zip(fields.match, fields.available, strict=True))
    mid_accept = np.concatenate(
        [s.fields("draft-mid").accept_prob for t in pool_traces.traces for s in t.segments]
    )
    assert 0.2 < mid_accept.mean() < 0.95  # the mid is closer to the target than the draft
    assert mid_accept.mean() > pool_traces.arrays["accept_prob"].mean()


def test_greedy_pool_replay_equals_the_real_env_step_by_step(
    close_pool_pair, pool_scenario, pool_traces, latency
):
    real = SpecDecodeEnv(pool_scenario, pair=close_pool_pair, split="test", latency=latency)
    sim = TraceReplayEnv(pool_scenario, traces=pool_traces, latency=latency)
    assert list(sim.action_space.nvec) == list(real.action_space.nvec) == [9, 10, len(POOL)]
    rng = np.random.default_rng(0)
    used, steps = set(), 0
    for index, trace in enumerate(pool_traces.traces):
        real_observation, _ = real.reset(
            seed=trace.seed, options={"domain": trace.domain, "prompt_index": trace.prompt_index}
        )
        sim_observation, _ = sim.reset(seed=1, options={"trace_index": index})
        np.testing.assert_allclose(real_observation, sim_observation, atol=1e-6)
        done = False
        while not done:
            action = pool_actions(rng, 1)[0]
            real_observation, real_reward, done, _, real_info = real.step(action)
            sim_observation, sim_reward, sim_done, _, sim_info = sim.step(action)
            result = sim_info["step_result"]
            assert step_outcome(result) == step_outcome(real_info["step_result"])
            assert result.confidences == pytest.approx(real_info["step_result"].confidences, abs=1e-5)
            assert result.acceptance_probs == pytest.approx(
                real_info["step_result"].acceptance_probs, abs=1e-5
            )
            if not done:  # the last observation's lookup is past the stored trajectory
                np.testing.assert_allclose(sim_observation, real_observation, atol=1e-5)
            assert sim_reward == pytest.approx(real_reward) and sim_done == done
            used.add((result.action.drafter, result.proposed > result.accepted))
            steps += 1
    assert steps > 60
    for drafter in POOL:  # each drafter both had a proposal rejected and ran without one
        assert {(drafter, True), (drafter, False)} <= used, drafter


@pytest.mark.slow
@pytest.mark.parametrize(("drafter", "temperature"), [("ngram", 0.3), ("draft-mid", 1.0)])
def test_sampled_pool_replay_matches_the_real_acceptance_per_position(
    close_pool_pair, prompt_file, latency, drafter, temperature
):
    """Static k = 3 with one drafter, sampled: P(accept | proposed) at positions 1..3, real env vs
    replay, each over 40 independently sampled episodes; within 4 standard errors wherever both
    together accepted at least 10 tokens (position 1 always does). For the lookup the replay has
    no draw of its own: a token is accepted iff the trace emits it (temperature 0.3, so that the
    random models' text repeats and the lookup finds something)."""
    sampled = scenario(prompt_file, temperature=temperature, max_new_tokens=24, drafters=("draft", drafter))
    traces = TraceSet.concatenate(
        [
            collect_traces(close_pool_pair, sampled, "train", seed=s, progress=False)
            for s in (100, 200, 300, 400, 500)
        ]
    )
    real = SpecDecodeEnv(sampled, pair=close_pool_pair, split="train", latency=latency)
    sim = TraceReplayEnv(sampled, traces=traces, latency=latency)

    def acceptance(env, episodes):
        counts = np.zeros((2, 3))  # proposed, accepted per position
        for episode in episodes:
            env.reset(**episode)
            done = False
            while not done:
                _, _, done, _, info = env.step(np.array([3, 0, 1]))
                result = info["step_result"]
                counts[0, : result.proposed] += 1
                counts[1, : result.accepted] += 1
        return counts

    real_counts = acceptance(real, [{"seed": 1000 + i} for i in range(len(traces))])
    sim_counts = acceptance(sim, [{"seed": i, "options": {"trace_index": i}} for i in range(len(traces))])
    compared = 0
    for (real_n, real_a), (sim_n, sim_a) in zip(real_counts.T, sim_counts.T, strict=False):
        if real_a + sim_a < 10:
            continue
        p_real, p_sim = real_a / real_n, sim_a / sim_n
        pooled = (real_a + sim_a) / (real_n + sim_n)
        error = np.sqrt(pooled * (1 - pooled) * (1 / real_n + 1 / sim_n))
        assert abs(p_real - p_sim) < 4 * error, (p_real, p_sim, error)
        compared += 1
    assert compared >= 1 and real_counts[1, 0] + sim_counts[1, 0] >= 10


def test_the_vectorised_env_replays_the_pool_like_the_single_env(pool_scenario, pool_traces, latency):
    vec = VecTraceReplay(pool_scenario, pool_traces, latency, num_envs=4)
    single = TraceReplayEnv(pool_scenario, traces=pool_traces, latency=latency)
    vec.start_traces([0, 1, 2, 3], seeds=[5, 6, 7, 8])
    single.reset(seed=5, options={"trace_index": 0})
    rng = np.random.default_rng(2)
    for _ in range(6):
        actions = np.stack(pool_actions(rng, 4))
        observations, rewards, dones, _ = vec.step(actions)
        observation, reward, done, _, _ = single.step(actions[0])
        np.testing.assert_allclose(observations[0], observation, atol=1e-6)
        assert rewards[0] == pytest.approx(reward)
        if done:
            break


def test_pool_trace_files_round_trip_and_old_files_mean_the_draft(pool_traces, tmp_path):
    path = pool_traces.save(tmp_path / "pool.npz")
    again = TraceSet.load(path)
    assert again.drafters == POOL
    assert again.traces[3].segments[1].fields("ngram") == pool_traces.traces[3].segments[1].fields("ngram")
    assert again.traces[3].segments[1].fields("draft-int4") == pool_traces.traces[3].segments[1].fields(
        "draft-int4"
    )
    # a file without drafters (written before the pool) replays the draft alone
    draft_only = TraceSet({k: v for k, v in again.arrays.items() if "/" not in k}, {**again.meta})
    del draft_only.meta["drafters"]
    old = TraceSet.load(draft_only.save(tmp_path / "old.npz"))
    assert old.drafters == ("draft",)
    with pytest.raises(TraceError, match="no fields of the drafter 'ngram'"):
        old.traces[0].segments[0].fields("ngram")
    # a file that names a drafter whose fields are missing is refused by name
    arrays = {k: v for k, v in again.arrays.items() if k != "ngram/match"}
    broken = TraceSet(arrays, again.meta)
    np.savez(tmp_path / "broken.npz", meta=np.array(json.dumps(again.meta)), **broken.arrays)
    with pytest.raises(TraceError, match="no field 'ngram/match'"):
        TraceSet.load(tmp_path / "broken.npz")


def test_traces_without_a_scenarios_drafter_are_refused_and_cached_apart(
    pool_scenario, greedy_traces, latency, shifted
):
    with pytest.raises(TraceError, match="offers .*'ngram'"):
        TraceReplayEnv(pool_scenario, traces=greedy_traces, latency=latency)
    # the draft-only scenario keeps its cache name; the pool's names its drafters in the hash
    assert cache_key(shifted, "test", 8, 0) != cache_key(pool_scenario, "test", 8, 0)
    default = Scenario(prompts=shifted.prompts)
    assert cache_key(default, "test", 8, 0) == cache_key(default.with_overrides(), "test", 8, 0)


def test_latency_prices_each_drafter_relative_to_the_draft(tmp_path):
    model = LatencyModel.from_cost_model()
    draft, _ = model.step_seconds(100, 4, 3)
    ngram, verify = model.step_seconds(100, 4, 3, "ngram")
    assert ngram == pytest.approx(draft * model.drafter_cost("ngram")) and ngram < draft
    assert model.drafter_cost("draft") == 1.0
    plain = LatencyModel.from_dict({**model.to_dict(), "drafter_costs": {"ngram": 0.1}})
    with pytest.raises(LatencyError, match="no price for the drafter 'draft-mid'"):
        plain.step_seconds(100, 2, 2, "draft-mid")
    plain.save(tmp_path / "latency.json")
    assert LatencyModel.load(tmp_path / "latency.json").drafter_costs == {"ngram": 0.1}
    with pytest.raises(LatencyError, match="drafter_costs"):
        LatencyModel.from_dict({**model.to_dict(), "drafter_costs": {"ngram": -1.0}})


def test_drafter_costs_are_measured_in_the_loop(close_pool_pair):
    costs = measure_drafter_costs(
        close_pool_pair, ["ngram", "draft-mid", "cascade"], steps=6, warmup_steps=1, progress=False
    )
    assert set(costs) == {"ngram", "draft-mid", "cascade"}
    assert all(np.isfinite(v) and v > 0 for v in costs.values())
    assert measure_drafter_costs(close_pool_pair, ["draft"], progress=False) == {}


def test_a_latency_file_without_the_pools_prices_is_refused(tmp_path):
    path = tmp_path / "latency.json"
    LatencyModel.from_dict({**LatencyModel.from_cost_model().to_dict(), "drafter_costs": {}}).save(path)
    pool = Scenario.from_dict({"latency": str(path), "drafters": ["draft", "ngram"]})
    with pytest.raises(ScenarioError, match="prices no step of the drafters \\['ngram'\\]"):
        pool.latency_model(pool.pair.info())


def test_best_static_ranges_over_drafters_and_matches_an_exhaustive_search(
    pool_scenario, pool_traces, latency
):
    grid = (0.0, 0.5)
    drafters = ("draft", "ngram", "cascade")
    bound = best_static(pool_traces, latency, grid, drafters=drafters)
    env = TraceReplayEnv(pool_scenario, traces=pool_traces, latency=latency)
    measured = {}
    for drafter, k, tau in itertools.product(drafters, range(pool_traces.k_max + 1), grid):
        if k == 0 and (tau > 0 or drafter != drafters[0]):
            continue
        runs = [
            run_episode(env, StaticController(k, tau, drafter), seed=0, options={"trace_index": i})
            for i in range(len(pool_traces))
        ]
        measured[(k, tau, drafter)] = sum(r.tokens for r in runs) / sum(r.seconds for r in runs)
    assert bound.table == pytest.approx(measured)
    assert (bound.k, bound.tau, bound.drafter) == max(measured, key=measured.get)
    draft_only = best_static(pool_traces, latency, grid)
    assert bound.tokens_per_s >= draft_only.tokens_per_s
    pooled = clairvoyant_bound(pool_traces, latency, drafters=drafters)
    assert pooled.tokens_per_s >= bound.tokens_per_s
    assert pooled.tokens_per_s >= clairvoyant_bound(pool_traces, latency).tokens_per_s


def test_no_controller_beats_the_clairvoyant_pool(pool_scenario, pool_traces, latency):
    env = TraceReplayEnv(pool_scenario, traces=pool_traces, latency=latency)
    window = int(pool_traces.meta["context_window"])
    rng = np.random.default_rng(4)

    class Random:
        def reset(self):
            pass

        def act(self, observation):
            return pool_actions(rng, 1)[0]

        def observe(self, result):
            pass

    for index, trace in enumerate(pool_traces.traces):
        accepts = realisations(trace, 1, 10 + index, POOL)[0]
        bound = clairvoyant(trace, accepts, env.latency, pool_traces.k_max, window, POOL)
        for controller in (Random(), StaticController(4, 0.0, "ngram"), StaticController(2, 0.0, "cascade")):
            summary = run_episode(env, controller, seed=10 + index, options={"trace_index": index})
            assert summary.tokens == bound.tokens and summary.seconds >= bound.seconds - 1e-12


def test_the_drafter_index_is_checked():
    tau = (0.0, 0.5)
    pool = ("draft", "ngram")
    assert to_engine_action(np.array([3, 1, 1]), 8, tau, drafters=pool).drafter == "ngram"
    assert to_engine_action(np.array([3, 1, 0, 1]), 8, tau, (None, None), pool).drafter == "ngram"
    for bad in (np.array([3, 1, 2]), np.array([3, 1]), np.array([3, 1, 0, 0, 1])):
        with pytest.raises(InvalidActionError, match="drafter_index"):
            to_engine_action(bad, 8, tau, drafters=pool)
    with pytest.raises(InvalidActionError, match="not offered here"):
        to_engine_action(StaticController(2, 0.0, "cascade").act(None), 8, tau, drafters=pool)
    with pytest.raises(ScenarioError, match="unknown drafter"):
        Scenario.from_dict({"drafters": ["draft", "medusa"]})
    with pytest.raises(ScenarioError, match="distinct"):
        Scenario.from_dict({"drafters": ["ngram", "ngram"]})


def test_a_pool_policy_exports_loads_and_chooses_drafters_online(
    tmp_path, close_pool_pair, pool_scenario, pool_traces, latency
):
    import torch
    from conftest import prompts, reference_greedy
    from stable_baselines3 import PPO

    import specrl
    from specrl.controllers import LearnedController
    from specrl.export import export_policy, verify_parity
    from specrl.features import N_FEATURES

    vec = VecTraceReplay(pool_scenario, pool_traces, latency, num_envs=4, seed=0)
    model = PPO("MlpPolicy", vec, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(128)
    with torch.no_grad():  # SB3's head starts near-uniform: re-draw it so the drafters vary
        weight = model.policy.action_net.weight
        weight.copy_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)) * 5)
    folder = tmp_path / "pool"
    common = dict(k_max=8, tau_grid=pool_scenario.tau_grid, scenarios=["words"], pair=close_pool_pair.name)
    with pytest.raises(Exception, match="drafters"):
        export_policy(model, folder, **common)  # the model has a drafter dimension
    export_policy(model, folder, drafters=POOL, **common)
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["action"]["layout"] == ["k", "tau_index", "drafter_index"]
    assert metadata["action"]["drafters"] == list(POOL) and metadata["feature_version"] == FEATURE_VERSION
    observations = np.random.default_rng(0).random((500, N_FEATURES), dtype=np.float32)
    verify_parity(model, folder, observations)
    controller = LearnedController.load(folder)
    assert controller.drafters == POOL and controller.n_features == N_FEATURES
    actions = controller.policy.predict(observations)
    assert len(set(actions[:, 2])) > 2
    for observation, (k, tau_index, drafter_index) in zip(observations[:50], actions[:50], strict=True):
        action = controller.act(observation)
        assert (action.k, action.tau, action.drafter) == (
            k,
            pool_scenario.tau_grid[tau_index],
            POOL[drafter_index],
        )
    # online: the greedy output is still the target's
    prompt = prompts(1, close_pool_pair.vocab_size, seed=3)[0]
    out = specrl.SpeculativeDecoder(close_pool_pair, controller).generate(
        prompt, max_new_tokens=24, stop_at_eos=False
    )
    assert out.token_ids == reference_greedy(close_pool_pair.target, prompt, 24)
    assert {step.drafter for step in out.steps} <= set(POOL)  # switching is tested in test_drafters


def test_a_policy_of_feature_version_1_reads_its_prefix():
    from specrl.controllers import LearnedController
    from specrl.features import FEATURE_COUNTS, N_FEATURES

    # the default policy shipped before the drafter pool (its program and metadata, kept as data)
    controller = LearnedController.load(Path(__file__).parent / "data" / "policy_feature_v1")
    assert controller.policy.metadata["feature_version"] == 1 and controller.n_features == FEATURE_COUNTS[1]
    assert controller.drafters == ("draft",)
    rng = np.random.default_rng(1)
    for _ in range(20):
        observation = rng.random(N_FEATURES, dtype=np.float32)
        changed = observation.copy()
        changed[FEATURE_COUNTS[1] :] = rng.random(N_FEATURES - FEATURE_COUNTS[1])
        assert controller.act(observation) == controller.act(changed)  # the pool features are not read
        ((k, tau_index, *_),) = controller.policy.predict(observation[None, : FEATURE_COUNTS[1]])
        assert controller.act(observation).k == k
    with pytest.raises(ValueError, match="observation"):
        controller.act(np.zeros(FEATURE_COUNTS[1], dtype=np.float32))


def test_a_scenario_of_the_lookup_alone_replays_the_pools_traces(pool_scenario, pool_traces, latency):
    lookup = replace(pool_scenario, drafters=("ngram",))
    # the store looks for the pool's file too, for a scenario of some of its drafters only
    assert pool_names(lookup, "test", 8, 0) == [cache_key(pool_scenario, "test", 8, 0) + ".npz"]
    assert pool_names(pool_scenario, "test", 8, 0) == []
    assert pool_names(replace(pool_scenario, drafters=("draft",)), "test", 8, 0) == []
    alone = TraceReplayEnv(lookup, traces=pool_traces, latency=latency)
    pool = TraceReplayEnv(pool_scenario, traces=pool_traces, latency=latency)
    assert alone.action_space.shape[0] == pool.action_space.shape[0] - 1  # no drafter index
    rng, ngram = np.random.default_rng(0), POOL.index("ngram")
    seen, _ = alone.reset(seed=3)
    expected, _ = pool.reset(seed=3)
    done, steps = False, 0
    while not done:  # the lookup alone steps as the pool does when it picks the lookup
        action = pool_actions(rng, 1)[0]
        action[-1] = ngram
        seen, reward, done, _, info = alone.step(action[:-1])
        expected, expected_reward, expected_done, _, expected_info = pool.step(action)
        assert np.array_equal(seen, expected) and reward == expected_reward and done == expected_done
        assert (info["tokens"], info["accepted"]) == (expected_info["tokens"], expected_info["accepted"])
        steps += 1
    assert steps > 3


def test_in_an_env_of_one_drafter_an_action_of_the_default_drafter_drafts_with_it():
    tau_grid = (0.0, 0.5)
    assert to_engine_action(Action(3), 8, tau_grid, drafters=("ngram",)).drafter == "ngram"
    assert to_engine_action(Action(3), 8, tau_grid).drafter == "draft"
    with pytest.raises(InvalidActionError, match="not offered"):  # one that names another drafter
        to_engine_action(Action(3, drafter="draft-mid"), 8, tau_grid, drafters=("ngram",))
    with pytest.raises(InvalidActionError, match="not offered"):  # the pool has no default for it
        to_engine_action(Action(3), 8, tau_grid, drafters=("ngram", "draft-mid"))
