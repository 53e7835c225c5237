"""Per-token stop rules: the engine hook is lossless and replays exactly; AdaEDL and the
SpecDec++-style rule do what their papers say; the predictor fit and the tuning are honest."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from conftest import prompts, reference_greedy
from stable_baselines3 import PPO
from test_engine import chi_square_p_value, exact_two_token_law

import specrl
from specrl.acceptance import AcceptancePredictor, PredictorError
from specrl.controllers import LearnedController
from specrl.controllers.stop_rules import (
    AcceptanceThreshold,
    AdaEDLController,
    EntropyBound,
    SpecDecPPController,
    stop_rule_table,
)
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action, StepResult
from specrl.envs import InvalidActionError, SpecDecodeEnv, TraceReplayEnv, VecTraceReplay
from specrl.export import PolicyError, export_policy, verify_parity
from specrl.features import N_FEATURES
from specrl.rule_tuning import fit_acceptance_predictor, on_trajectory_signals, tune_controller
from specrl.traces import TraceSet


class RandomStop:
    """A stop rule that stops at random (seeded), recording what it was asked."""

    def __init__(self, seed: int, probability: float = 0.3) -> None:
        self.rng = np.random.default_rng(seed)
        self.probability = probability
        self.calls: list[tuple[int, float, float]] = []

    def __call__(self, position: int, confidence: float, entropy: float) -> bool:
        self.calls.append((position, confidence, entropy))
        return bool(self.rng.random() < self.probability)


class ActionController:
    """Returns one fixed Action (with its stop rule) every step."""

    def __init__(self, action: Action) -> None:
        self.action = action

    def reset(self) -> None:
        pass

    def act(self, observation) -> Action:
        return self.action

    def observe(self, result: StepResult) -> None:
        pass


# ---- the engine hook --------------------------------------------------------------------------


def test_action_refuses_a_stop_rule_that_is_not_callable():
    with pytest.raises(ValueError, match="StopRule"):
        Action(4, 0.0, stop=0.5)
    assert Action(4, 0.0, stop=RandomStop(0)) == Action(4, 0.0)  # the rule is not part of equality


def test_the_engine_asks_the_rule_after_every_drafted_token_and_stops_before_it(pair):
    rule = RandomStop(seed=0, probability=0.3)
    decoder = specrl.SpeculativeDecoder(pair, ActionController(Action(6, 0.0, stop=rule)))
    out = decoder.generate(prompts(1, pair.vocab_size)[0], max_new_tokens=40, stop_at_eos=False)
    asked = iter(rule.calls)
    stopped = 0
    for step in out.steps:
        calls = [next(asked) for _ in range(step.draft_forwards)]
        assert [c[0] for c in calls] == list(range(step.draft_forwards))  # positions 0, 1, ...
        assert [c[1] for c in calls] == step.confidences and [c[2] for c in calls] == step.entropies
        if step.stopped_by_tau:  # the rule said stop at the last drafted position: not proposed
            stopped += 1
            assert step.proposed == step.draft_forwards - 1
        else:
            assert step.proposed == step.draft_forwards == step.k
    assert next(asked, None) is None
    assert 0 < stopped < len(out.steps)


@pytest.mark.parametrize("seed", range(3))
def test_greedy_output_with_a_stop_rule_equals_plain_greedy(pair, seed):
    prompt = prompts(3, pair.vocab_size, seed=21)[seed]
    expected = reference_greedy(pair.target, prompt, 30)
    decoder = specrl.SpeculativeDecoder(pair, ActionController(Action(8, 0.0, stop=RandomStop(seed, 0.4))))
    assert decoder.generate(prompt, max_new_tokens=30, stop_at_eos=False).token_ids == expected


@pytest.mark.slow
def test_sampling_with_a_stop_rule_matches_the_target_law(small_vocab_pair):
    """The stop decision depends only on the draft: the output law stays the target's."""
    prompt, sampling = [1, 2, 3, 0, 4], SamplingConfig(1.0)
    predictor = AcceptancePredictor([-4.0, 8.0, 0.0, 0.0])
    # The first drafted token's signals depend on the prompt only; the second's on the sampled
    # first draft token. A cumulative threshold at p(first) times the midrange of p(second) makes the
    # rule depend on the draft's sampling and stop after one or two proposals.
    probe = RandomStop(seed=0, probability=0.0)
    probe_decoder = specrl.SpeculativeDecoder(small_vocab_pair, ActionController(Action(2, 0.0, stop=probe)))
    for seed in range(40):
        probe_decoder.generate(prompt, max_new_tokens=3, stop_at_eos=False, seed=seed, temperature=1.0)
    first = predictor.probability(*probe.calls[0][1:])
    second = [predictor.probability(c, h) for position, c, h in probe.calls if position == 1]
    rule = AcceptanceThreshold(predictor, float(first * (min(second) + max(second)) / 2), cumulative=True)
    decoder = specrl.SpeculativeDecoder(small_vocab_pair, ActionController(Action(4, 0.0, stop=rule)))
    counts = torch.zeros(small_vocab_pair.vocab_size, small_vocab_pair.vocab_size)
    proposed = np.zeros(5)
    for seed in range(2500):
        out = decoder.generate(
            prompt, max_new_tokens=3, stop_at_eos=False, seed=seed, temperature=1.0
        )  # k <= 2
        counts[out.token_ids[0], out.token_ids[1]] += 1
        proposed[out.steps[0].proposed] += 1
    # the rule must stop at different positions for this test to mean anything
    assert (proposed >= 100).sum() >= 2, proposed
    law = exact_two_token_law(small_vocab_pair, prompt, sampling)
    assert chi_square_p_value(counts, law) > 1e-3


# ---- replay ---------------------------------------------------------------------------------------


def outcome(result) -> tuple:
    return (result.k, result.proposed, result.accepted, result.emitted, result.stopped_by_tau, result.tokens)


@pytest.mark.parametrize("make", [lambda: AdaEDLController(k=6, gamma=0.3), "specdec++"])
def test_greedy_replay_of_stop_rules_equals_the_real_env(close_pair, shifted, greedy_traces, latency, make):
    split = greedy_traces.meta["split"]
    real = SpecDecodeEnv(shifted, pair=close_pair, split=split, latency=latency)
    sim = TraceReplayEnv(shifted, traces=greedy_traces, latency=latency)
    predictor = fit_acceptance_predictor_on(greedy_traces)
    stopped = steps = 0
    for index, trace in enumerate(greedy_traces.traces):
        controllers = [
            SpecDecPPController(predictor, 0.6, 6, cumulative=True) if make == "specdec++" else make()
            for _ in range(2)
        ]
        observations = [
            real.reset(seed=trace.seed, options={"domain": trace.domain, "prompt_index": trace.prompt_index})[
                0
            ],
            sim.reset(seed=1, options={"trace_index": index})[0],
        ]
        for controller in controllers:
            controller.reset()
        done = False
        while not done:
            results = []
            for env, controller, observation in zip((real, sim), controllers, observations, strict=True):
                _, _, done, _, info = env.step(controller.act(observation))
                controller.observe(info["step_result"])
                results.append(info["step_result"])
            assert outcome(results[0]) == outcome(results[1])
            stopped += results[0].stopped_by_tau
            steps += 1
    assert steps > 40 and 0 < stopped < steps


def fit_acceptance_predictor_on(traces):
    confidence, entropy, target = on_trajectory_signals(traces)
    return AcceptancePredictor.fit(confidence, entropy, target)


# ---- the rules ------------------------------------------------------------------------------------


def test_entropy_bound_stops_exactly_where_the_bound_falls_below_lambda():
    rule = EntropyBound(gamma=0.5, lam=0.4)
    # 1 - sqrt(0.5 * H) < 0.4  <=>  H > 0.72
    assert not rule(0, 0.9, 0.71) and rule(0, 0.9, 0.73)
    assert not rule(3, 0.1, 0.0)  # confidence plays no part


def test_adaedl_threshold_follows_the_rejection_rate_and_resets():
    controller = AdaEDLController(k=5, gamma=0.5, lambda_init=0.3, beta=0.5)
    action = controller.act(None)
    assert action.k == 5 and action.tau == 0.0 and action.stop is controller.rule

    def step(proposed, accepted):
        return StepResult(Action(5), 5, proposed, accepted, accepted + 1, 0.0, 0.0)

    controller.observe(step(4, 0))  # rejection rate 1
    assert controller.rule.lam == pytest.approx(0.5 * 0.3 + 0.5 * 1.0)
    controller.observe(step(4, 4))  # rejection rate 0
    assert controller.rule.lam == pytest.approx(0.5 * 0.65)
    controller.observe(step(0, 0))  # a plain step says nothing about the draft
    assert controller.rule.lam == pytest.approx(0.325)
    controller.reset()
    assert controller.rule.lam == 0.3
    with pytest.raises(ValueError):
        AdaEDLController(gamma=0.0)


def test_specdecpp_per_token_and_cumulative_forms():
    predictor = AcceptancePredictor([0.0, 0.0, 0.0, 0.0])  # predicts 0.5 everywhere
    per_token = AcceptanceThreshold(predictor, 0.4)
    assert [per_token(i, 0.5, 1.0) for i in range(4)] == [False] * 4
    cumulative = AcceptanceThreshold(predictor, 0.2, cumulative=True)
    # survival 0.5, 0.25, 0.125: stop at the third token; a new step starts over at position 0
    assert [cumulative(i, 0.5, 1.0) for i in range(3)] == [False, False, True]
    assert cumulative(0, 0.5, 1.0) is False
    controller = SpecDecPPController(predictor, threshold=0.2, k=6, cumulative=True)
    assert controller.act(None).k == 6 and controller.name == "specdec++:k=6,threshold=0.2,cumulative"
    with pytest.raises(ValueError):
        SpecDecPPController(predictor, threshold=1.5)


# ---- the predictor --------------------------------------------------------------------------------


def test_predictor_fit_recovers_known_weights_with_hard_and_soft_labels():
    rng = np.random.default_rng(0)
    confidence = rng.uniform(0.05, 1.0, 40_000)
    entropy = rng.uniform(0.0, 4.0, 40_000)
    truth = AcceptancePredictor([-1.0, 3.0, 0.5, -0.6])
    probability = truth.probabilities(confidence, entropy)
    hard = AcceptancePredictor.fit(confidence, entropy, rng.random(40_000) < probability)
    soft = AcceptancePredictor.fit(confidence, entropy, probability)
    np.testing.assert_allclose(hard.weights, truth.weights, atol=0.25)
    np.testing.assert_allclose(soft.weights, truth.weights, atol=0.02)
    assert soft.metadata["fit"]["log_loss"] < soft.metadata["fit"]["log_loss_of_base_rate"]
    assert math.isclose(soft.probability(0.7, 1.2), float(soft.probabilities([0.7], [1.2])[0]), rel_tol=1e-9)


def test_predictor_files_round_trip_and_bad_files_are_refused(tmp_path):
    predictor = AcceptancePredictor([0.1, 0.2, 0.3, 0.4], {"pair": "p"})
    predictor.save(tmp_path / "p.json")
    loaded = AcceptancePredictor.load(tmp_path / "p.json")
    assert loaded.weights == predictor.weights and loaded.metadata == {"pair": "p"}
    data = predictor.to_dict()
    with pytest.raises(PredictorError, match="refit"):
        AcceptancePredictor.from_dict({**data, "version": 99})
    with pytest.raises(PredictorError, match="not an acceptance predictor"):
        AcceptancePredictor.from_dict({"weights": [0, 0, 0, 0]})
    with pytest.raises(PredictorError, match="finite"):
        AcceptancePredictor([0.0, float("nan"), 0.0, 0.0])
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(PredictorError, match="JSON"):
        AcceptancePredictor.load(tmp_path / "bad.json")
    with pytest.raises(PredictorError, match="no acceptance predictor"):
        AcceptancePredictor.load(tmp_path / "missing.json")


# ---- tuning ---------------------------------------------------------------------------------------


def test_tuning_picks_the_fastest_setting_of_the_grid_and_never_looks_at_test(
    shifted, greedy_traces, latency
):
    grid = [{"k": k} for k in (0, 2, 4, 6)]
    validation = TraceSet(greedy_traces.arrays, {**greedy_traces.meta, "split": "validation"})
    tuned = tune_controller("static", specrl.StaticController, grid, shifted, validation, latency)
    speeds = [row["tokens_per_s"] for row in tuned.grid]
    assert len(set(speeds)) > 1 and tuned.tokens_per_s == max(speeds)
    assert (
        tuned.setting == grid[int(np.argmax(speeds))] and tuned.controller.act(None).k == tuned.setting["k"]
    )
    test_traces = TraceSet(greedy_traces.arrays, {**greedy_traces.meta, "split": "test"})
    with pytest.raises(ValueError, match="never on test"):
        tune_controller("static", specrl.StaticController, grid, shifted, test_traces, latency)
    with pytest.raises(ValueError, match="train traces only"):
        fit_acceptance_predictor([validation])


def test_on_trajectory_signals_skip_positions_past_the_end(greedy_traces):
    confidence, entropy, target = on_trajectory_signals(greedy_traces)
    assert len(confidence) == len(entropy) == len(target) == int(greedy_traces.arrays["segment_end"].sum())


# ---- the per-token stop dimension of the envs' action space ----------------------------------------


@pytest.fixture(scope="module")
def predictor(greedy_traces):
    return fit_acceptance_predictor_on(greedy_traces)


def test_the_stop_dimension_exists_only_with_a_predictor(shifted, greedy_traces, latency, predictor):
    plain = TraceReplayEnv(shifted, traces=greedy_traces, latency=latency)
    with_stop = TraceReplayEnv(shifted, traces=greedy_traces, latency=latency, predictor=predictor)
    assert list(plain.action_space.nvec) == [9, 10]
    assert list(with_stop.action_space.nvec) == [9, 10, len(shifted.stop_grid)]
    vec = VecTraceReplay(shifted, greedy_traces, latency, num_envs=2, predictor=predictor)
    assert vec.action_space == with_stop.action_space
    with_stop.reset(seed=0)
    with pytest.raises(InvalidActionError, match="stop_index"):
        with_stop.step(np.array([3, 0, len(shifted.stop_grid)]))
    plain.reset(seed=0)
    with pytest.raises(InvalidActionError):
        plain.step(np.array([3, 0, 1]))
    rules = stop_rule_table(predictor, shifted.stop_grid)
    assert rules[0] is None and all(
        r.cumulative and r.threshold == h for r, h in zip(rules[1:], shifted.stop_grid[1:], strict=True)
    )


def test_stop_indices_replay_exactly_single_and_vectorised(
    close_pair, shifted, greedy_traces, latency, predictor
):
    """Random [k, tau_index, stop_index] actions: the real env, the single replay and the
    vectorised replay take the same steps."""
    n = len(greedy_traces)
    split = greedy_traces.meta["split"]
    real = SpecDecodeEnv(shifted, pair=close_pair, split=split, latency=latency, predictor=predictor)
    singles = [
        TraceReplayEnv(shifted, traces=greedy_traces, latency=latency, predictor=predictor) for _ in range(n)
    ]
    vec = VecTraceReplay(shifted, greedy_traces, latency, num_envs=n, seed=0, predictor=predictor)
    vec.start_traces(range(n), seeds=list(range(n)))
    for i, env in enumerate(singles):
        env.reset(seed=i, options={"trace_index": i})
    rng = np.random.default_rng(3)
    sizes = vec.action_space.nvec
    live = np.ones(n, dtype=bool)
    stopped = 0
    while live.any():
        actions = np.stack([rng.integers(0, sizes) for _ in range(n)])
        actions[:, 1] = 0  # tau 0: every early stop is the stop rule's
        vec_observations, vec_rewards, vec_dones, _ = vec.step(actions)
        for i in np.flatnonzero(live):
            observation, reward, done, _, info = singles[i].step(actions[i])
            stopped += info["step_result"].stopped_by_tau
            assert bool(vec_dones[i]) == done and vec_rewards[i] == pytest.approx(reward, rel=1e-5, abs=1e-5)
            if done:
                live[i] = False
            else:
                np.testing.assert_allclose(vec_observations[i], observation, atol=1e-5)
    assert stopped > 5
    trace = greedy_traces.traces[0]
    real.reset(seed=trace.seed, options={"domain": trace.domain, "prompt_index": trace.prompt_index})
    singles[0].reset(seed=0, options={"trace_index": 0})
    done = False
    while not done:
        action = rng.integers(0, sizes)
        _, _, done, _, real_info = real.step(action)
        _, _, _, _, sim_info = singles[0].step(action)
        assert outcome(real_info["step_result"]) == outcome(sim_info["step_result"])


# ---- export and online use of a policy with the stop dimension -------------------------------------


def test_a_policy_with_a_stop_dimension_exports_loads_and_runs_both_decisions(
    tmp_path, shifted, greedy_traces, latency, predictor, pair
):
    vec = VecTraceReplay(shifted, greedy_traces, latency, num_envs=4, seed=0, predictor=predictor)
    model = PPO("MlpPolicy", vec, n_steps=32, batch_size=64, n_epochs=1, seed=0, device="cpu")
    model.learn(128)
    with torch.no_grad():  # SB3's head starts near-uniform: re-draw it so actions vary
        weight = model.policy.action_net.weight
        weight.copy_(torch.randn(weight.shape, generator=torch.Generator().manual_seed(0)) * 5)
    folder = tmp_path / "stopper"
    common = dict(k_max=8, tau_grid=shifted.tau_grid, scenarios=["words"], pair=pair.name)
    with pytest.raises(PolicyError, match="both stop_grid and its acceptance predictor"):
        export_policy(model, folder, stop_grid=shifted.stop_grid, **common)
    with pytest.raises(PolicyError, match="MultiDiscrete"):
        export_policy(model, folder, **common)  # the model has a third dimension
    export_policy(model, folder, stop_grid=shifted.stop_grid, predictor=predictor, **common)
    observations = np.random.default_rng(0).random((500, N_FEATURES), dtype=np.float32)
    verify_parity(model, folder, observations)
    controller = LearnedController.load(folder)
    assert controller.stop_grid == tuple(shifted.stop_grid)
    assert controller.policy.predictor.weights == predictor.weights
    actions = controller.policy.predict(observations)
    assert actions.shape == (500, 3) and len(set(actions[:, 2])) > 1
    for observation, (k, tau_index, stop_index) in zip(observations[:50], actions[:50], strict=True):
        action = controller.act(observation)
        assert (action.k, action.tau) == (k, shifted.tau_grid[tau_index])
        h = shifted.stop_grid[stop_index]
        assert (action.stop is None) == (h == 0) and (h == 0 or action.stop.threshold == h)
    # online: the greedy output is still the target's
    prompt = prompts(1, pair.vocab_size, seed=3)[0]
    out = specrl.SpeculativeDecoder(pair, controller).generate(prompt, max_new_tokens=24, stop_at_eos=False)
    assert out.token_ids == reference_greedy(pair.target, prompt, 24)
    metadata = json.loads((folder / "metadata.json").read_text())
    metadata["action"]["stop_grid"] = [0.5, 0.7]
    (folder / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(PolicyError, match="stop_grid must start at 0"):
        LearnedController.load(folder)
