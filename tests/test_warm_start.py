"""The warm start (rules cloned into the policy before PPO) and checkpoint selection by the worst
ratio to the best rule."""

from __future__ import annotations

import numpy as np
import pytest
from stable_baselines3 import PPO

from specrl.acceptance import AcceptancePredictor
from specrl.controllers import StaticController, TCPController
from specrl.controllers.priced import PricedController
from specrl.controllers.stop_rules import AdaEDLController, SpecDecPPController, stop_rule_table
from specrl.engine.types import Action
from specrl.envs import VecTraceReplay
from specrl.envs.actions import to_action_indices, to_engine_action
from specrl.features import FEATURE_NAMES, N_FEATURES
from specrl.latency.family import LatencyFamily
from specrl.trace_evaluation import evaluate_controller
from specrl.training.comparison import BEST_STATIC, PLAIN, TCP
from specrl.training.selection import PolicyVsRules
from specrl.training.warm_start import (
    CARRY_MARGIN,
    PRICED,
    ActionEncoder,
    Teacher,
    clone,
    demonstrations,
    parts,
    teacher,
)

TAUS = (0.0, 0.3, 0.6)
STOPS = (0.0, 0.4, 0.7)
DRAFTERS = ("draft", "ngram")
PREDICTOR = AcceptancePredictor(np.array([-1.0, 3.0, -0.5, 0.2]))


def test_an_index_action_played_and_read_back_is_the_same_index_action():
    rules = stop_rule_table(PREDICTOR, STOPS)
    rng = np.random.default_rng(0)
    for _ in range(200):
        indices = np.array([rng.integers(0, 9), rng.integers(0, 3), rng.integers(0, 3), rng.integers(0, 2)])
        action = to_engine_action(indices, 8, TAUS, rules, DRAFTERS)
        assert np.array_equal(to_action_indices(action, 8, TAUS, rules, DRAFTERS), indices)


def test_actions_the_space_cannot_play_have_no_indices():
    rules = stop_rule_table(PREDICTOR, STOPS)
    assert to_action_indices(Action(3, 0.45), 8, TAUS, rules, DRAFTERS) is None  # tau off the grid
    assert to_action_indices(Action(9, 0.0), 8, TAUS, rules, DRAFTERS) is None  # k over k_max
    assert to_action_indices(Action(3, drafter="draft-mid"), 8, TAUS, rules, DRAFTERS) is None
    per_token = SpecDecPPController(PREDICTOR, threshold=0.4, k=4).action  # the table's rules are cumulative
    assert to_action_indices(per_token, 8, TAUS, rules, DRAFTERS) is None
    cumulative = SpecDecPPController(PREDICTOR, threshold=0.4, k=4, cumulative=True).action
    assert to_action_indices(cumulative, 8, TAUS, rules, DRAFTERS).tolist() == [4, 0, 1, 0]
    other = AcceptancePredictor(np.array([0.0, 1.0, 0.0, 0.0]))
    elsewhere = SpecDecPPController(other, threshold=0.4, k=4, cumulative=True).action
    assert to_action_indices(elsewhere, 8, TAUS, rules, DRAFTERS) is None  # another predictor
    assert to_action_indices(Action(2, 0.3), 8, TAUS, (None,), ("draft",)).tolist() == [2, 1]


def test_the_teacher_of_a_part_is_its_fastest_rule_the_space_can_play():
    encoder = ActionEncoder(8, TAUS, STOPS, ("draft",), PREDICTOR)
    controllers = {
        "adaedl": AdaEDLController(k=6, gamma=0.3),  # its entropy stop is no stop index
        TCP: TCPController(),
        BEST_STATIC: StaticController(4, 0.3),
    }
    rules = {"adaedl": 130.0, TCP: 110.0, BEST_STATIC: 120.0, PLAIN: 70.0}
    chosen = teacher("mixed/code", rules, controllers, encoder, 33)
    assert (
        chosen.role == BEST_STATIC and chosen.validation_tokens_per_s == 120.0 and chosen.part == "mixed/code"
    )
    assert teacher("mixed/code", rules | {TCP: 125.0}, controllers, encoder, 33).role == TCP


def test_the_priced_rule_teaches_unless_a_rule_is_clearly_faster():
    """A clone of the priced rule carries to other machines, a clone of a rule tuned to this one
    does not: within CARRY_MARGIN of the fastest, the priced rule teaches."""
    encoder = ActionEncoder(8, TAUS, STOPS, ("draft",), PREDICTOR)
    controllers = {TCP: TCPController(), BEST_STATIC: StaticController(4, 0.3), PRICED: PricedController()}
    close = {TCP: 110.0, BEST_STATIC: 120.0, PRICED: 120.0 / (1 + CARRY_MARGIN) + 0.01}
    assert teacher("code", close, controllers, encoder, N_FEATURES).role == PRICED
    far = close | {PRICED: 120.0 / (1 + CARRY_MARGIN) - 0.5}
    assert teacher("code", far, controllers, encoder, N_FEATURES).role == BEST_STATIC


def test_a_scenario_of_several_domains_has_a_part_per_domain(greedy_traces):
    split = parts(greedy_traces)
    assert sorted(split) == sorted(set(greedy_traces.domains)) and len(split) > 1
    assert sum(len(t) for t in split.values()) == len(greedy_traces)
    for domain, traces in split.items():
        assert set(traces.domains) == {domain} and traces.meta == greedy_traces.meta
    code = split["code"]
    assert parts(code)["code"] is code  # one domain: the set itself


def test_a_policy_cloned_from_a_rule_plays_the_rule(shifted, greedy_traces, latency):
    encoder = ActionEncoder(greedy_traces.k_max, shifted.tau_grid, None, ("draft",), None)
    rule = StaticController(3, shifted.tau_grid[1])
    shown = demonstrations(
        Teacher("words", BEST_STATIC, rule, 1.0), shifted, greedy_traces, latency, encoder, 1
    )
    steps = evaluate_controller(rule, shifted, greedy_traces, latency).steps
    assert len(shown.actions) == steps and (shown.actions == [3, 1]).all()  # every step, as played
    env = VecTraceReplay(shifted, greedy_traces, latency, num_envs=2, seed=0)
    model = PPO("MlpPolicy", env, n_steps=8, batch_size=16, seed=0, device="cpu")
    before = model.predict(shown.observations, deterministic=True)[0]
    agreement = clone(model, None, shown, seed=0, epochs=20)
    after = model.predict(shown.observations, deterministic=True)[0]
    assert (before != [3, 1]).any(axis=1).mean() > 0.5  # a random policy does not play it ...
    assert agreement == 1.0 and (after == [3, 1]).all()  # ... the clone does


def test_the_priced_rule_demonstrates_under_machines_drawn_from_a_family(shifted, greedy_traces):
    encoder = ActionEncoder(greedy_traces.k_max, shifted.tau_grid, None, ("draft",), None)
    rule = Teacher("words", PRICED, PricedController(), 1.0)
    family = LatencyFamily(("cpu-epyc-2t-nov", "gpu-like-a100"), perturbations=0)
    shown = demonstrations(rule, shifted, greedy_traces, family, encoder, 1, seed=0)
    price = shown.observations[:, FEATURE_NAMES.index("draft_price")]
    # each machine's draft_price as the features read it (one row, context 256)
    cpu, gpu = (family.profile(name).price_line(1, 256).ratios(1)[0] for name in family.names)
    assert gpu < cpu / 2
    cheap = price < (cpu + gpu) / 2  # the GPU-like machine's draft is the cheaper: its episodes
    assert 0.2 < cheap.mean() < 0.8  # the episodes ran on both machines
    # the rule reads those prices: it drafts longer where drafting is cheap
    assert shown.actions[cheap, 0].mean() > shown.actions[~cheap, 0].mean()
    again = demonstrations(rule, shifted, greedy_traces, family, encoder, 1, seed=0)
    assert np.array_equal(again.observations, shown.observations)  # the draws follow the seed
    other = demonstrations(rule, shifted, greedy_traces, family, encoder, 1, seed=1000)
    assert not np.array_equal(other.observations, shown.observations)  # another part's draws differ


def test_dagger_labels_the_states_a_driver_reaches_with_the_teachers_actions(shifted, greedy_traces, latency):
    encoder = ActionEncoder(greedy_traces.k_max, shifted.tau_grid, None, ("draft",), None)
    rule = Teacher("words", TCP, TCPController(), 1.0)
    plain = lambda observations: np.tile([0, 0], (len(observations), 1))  # noqa: E731  (a driver that never drafts)
    shown = demonstrations(rule, shifted, greedy_traces, latency, encoder, 1, driver=plain)
    tokens = sum(t.tokens for t in greedy_traces.traces)  # plain decoding: a step per token
    assert (
        len(shown.actions) == evaluate_controller(StaticController(0), shifted, greedy_traces, latency).steps
    )
    assert len(shown.actions) == tokens and (shown.actions[:, 0] > 0).all()  # labelled by TCP, which drafts
    assert (
        shown.observations[:, 14] == 1.0
    ).mean() > 0.9  # steps_since_draft saturated: states TCP never visits


def test_a_teacher_whose_actions_the_space_cannot_play_is_refused(shifted, greedy_traces, latency):
    encoder = ActionEncoder(greedy_traces.k_max, (0.0,), None, ("draft",), None)
    with pytest.raises(ValueError, match="cannot play"):
        demonstrations(
            Teacher("words", BEST_STATIC, StaticController(2, 0.5), 1.0),
            shifted,
            greedy_traces,
            latency,
            encoder,
            1,
        )


class FakeScenario:
    def __init__(self, name: str) -> None:
        self.name = name


class FakeComparison:
    """Tokens/s of the rules and of a policy per scenario, as a Comparison would measure them."""

    def __init__(self, rules: dict[str, dict[str, float]], policy: dict[str, float]) -> None:
        self.rules, self.policy = rules, policy

    def rules_on(self, scenario, traces):
        return dict(self.rules[scenario.name]), None

    def policy_on(self, scenario, traces, predict):
        return self.policy[scenario.name]


def test_selection_scores_a_policy_by_its_worst_ratio_to_each_scenarios_best_rule():
    rules = {
        "code": {PLAIN: 70.0, TCP: 100.0, "hf-heuristic": 110.0, BEST_STATIC: 120.0},
        "prose": {PLAIN: 70.0, TCP: 90.0, "specdec++": 95.0, BEST_STATIC: 80.0},
    }
    selection = PolicyVsRules(
        {"machine": FakeComparison(rules, {"code": 126.0, "prose": 85.5})},
        [FakeScenario("code"), FakeScenario("prose")],
        {"code": None, "prose": None},
    )
    assert (
        selection.best_rule("code") == (BEST_STATIC, 120.0) and selection.best_rule("prose")[0] == "specdec++"
    )
    report = selection(lambda observations: observations)
    assert report["ratio_vs_best_rule"] == pytest.approx({"code": 1.05, "prose": 0.9})
    assert report["worst_ratio_vs_best_rule"] == pytest.approx(0.9)  # not the mean: prose loses
    assert report["ratio_vs_tcp"] == pytest.approx(np.sqrt(1.26 * 0.95))
    assert report["scalars"]["prose/ratio_vs_best_rule"] == pytest.approx(0.9)
    gpu_rules = {name: {role: 2 * value for role, value in roles.items()} for name, roles in rules.items()}
    profiles = PolicyVsRules(  # two machines: every scenario under each is an entry
        {
            "cpu": FakeComparison(rules, {"code": 126.0, "prose": 85.5}),
            "gpu": FakeComparison(gpu_rules, {"code": 240.0, "prose": 209.0}),
        },
        [FakeScenario("code"), FakeScenario("prose")],
        {"code": None, "prose": None},
    )
    report = profiles(lambda observations: observations)
    assert report["ratio_vs_best_rule"] == pytest.approx(
        {"code@cpu": 1.05, "prose@cpu": 0.9, "code@gpu": 1.0, "prose@gpu": 1.1}
    )
    assert report["worst_ratio_vs_best_rule"] == pytest.approx(0.9)
