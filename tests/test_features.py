"""Observation features: fixed length, documented ranges, exact values on scripted histories,
and one feature function shared by the env and the online decoder."""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import replace

import numpy as np
import pytest
from conftest import prompts

import specrl
from specrl import features as features_module
from specrl.engine.timing import DeviceClock
from specrl.engine.types import Action, StepResult
from specrl.envs import run_episode
from specrl.features import (
    FEATURE_COUNTS,
    FEATURE_DRAFTERS,
    FEATURE_NAMES,
    FEATURE_VERSION,
    N_FEATURES,
    STEP_NORM,
    FeatureTracker,
    GenerationSettings,
    PriceLine,
)
from specrl.latency import CostModel, LatencyModel

SETTINGS = GenerationSettings(max_new_tokens=100, context_window=200, vocab_size=64, temperature=0.0)
INDEX = {name: i for i, name in enumerate(FEATURE_NAMES)}


def step(
    k,
    proposed,
    accepted,
    confidences=(),
    entropies=None,
    probs=None,
    tau=0.0,
    draft_s=0.0,
    verify_s=0.01,
    context=100,
    emitted=None,
    stopped=False,
    drafter="draft",
) -> StepResult:
    confidences = list(confidences)
    if probs is None:  # greedy-style: 1 for the accepted run, 0 after
        probs = [1.0] * accepted + [0.0] * (proposed - accepted)
    return StepResult(
        action=Action(k, tau, drafter=drafter),
        k=k,
        proposed=proposed,
        accepted=accepted,
        emitted=accepted + 1 if emitted is None else emitted,
        draft_seconds=draft_s,
        verify_seconds=verify_s,
        confidences=confidences,
        entropies=list(entropies or [1.0] * len(confidences)),
        acceptance_probs=list(probs),
        stopped_by_tau=stopped,
        context_length=context,
    )


def features(tracker: FeatureTracker) -> dict[str, float]:
    return dict(zip(FEATURE_NAMES, tracker.vector().tolist(), strict=True))


def test_vector_has_fixed_length_version_and_documented_names():
    assert isinstance(FEATURE_VERSION, int) and FEATURE_VERSION >= 1
    assert len(set(FEATURE_NAMES)) == N_FEATURES
    vector = FeatureTracker(SETTINGS, prompt_length=50).vector()
    assert vector.shape == (N_FEATURES,) and vector.dtype == np.float32
    for name in FEATURE_NAMES:  # each feature has its row in the module's documentation table
        assert f" {name} " in features_module.__doc__, name


def test_initial_vector_before_any_step():
    settings = GenerationSettings(
        max_new_tokens=100, context_window=200, vocab_size=64, temperature=1.0, batch_size=4
    )
    values = features(FeatureTracker(settings, prompt_length=50))
    assert values["context_fraction"] == pytest.approx(0.25)
    assert values["temperature"] == pytest.approx(0.5)
    assert values["batch_size"] == pytest.approx(2 / 8)
    assert values["steps_since_draft"] == 1.0  # nothing known yet: maximally stale
    assert values["progress"] == 0.0 and values["acceptance_short"] == 0.0 and values["cost_ratio"] == 0.0


def test_scripted_history_gives_the_documented_values():
    tracker = FeatureTracker(SETTINGS, prompt_length=50)
    tracker.update([step(4, 4, 4, [0.9, 0.8, 0.7, 0.6], draft_s=0.004, verify_s=0.010, context=50)])
    tracker.update([step(4, 4, 1, [0.9, 0.3, 0.5, 0.2], draft_s=0.004, verify_s=0.010, context=55)])
    tracker.update([step(0, 0, 0, [], verify_s=0.008, context=57)])  # a plain step
    assert features(tracker)["steps_since_draft"] == pytest.approx(1 / 16)
    tracker.update(
        [
            step(
                3,
                1,
                0,
                [0.6, 0.4],
                entropies=[1.0, 2.0],
                probs=[0.25],
                tau=0.5,
                draft_s=0.002,
                verify_s=0.009,
                context=58,
                stopped=True,
            )
        ]
    )
    values = features(tracker)
    expected = {
        "acceptance_short": 5 / 9,  # (4 + 1 + 0) / (4 + 4 + 1): the plain step does not count
        "acceptance_long": 5 / 9,
        "acceptance_prob_short": (4 + 1 + 0.25) / 9,
        "last_proposed": 1 / 16,
        "last_accepted": 0.0,
        "last_k": 3 / 16,
        "last_tau": 0.5,
        "last_stopped_by_tau": 1.0,
        "confidence_mean": 0.5,  # the last step's two draft positions, the tau-stopped one included
        "confidence_min": 0.4,
        "entropy_mean": 1.5 / math.log(64),
        "rejected_confidence": (0.3 + 0.6) / 2,  # first rejected token of steps 2 and 4
        "accepted_confidence": (0.9 + 0.8 + 0.7 + 0.6 + 0.9) / 5,
        "cost_ratio": (0.010 / 10) / (0.037 / 4),  # seconds per draft forward / per verification
        "steps_since_draft": 0.0,
        "context_fraction": 59 / 200,
        "progress": 9 / 100,
        "temperature": 0.0,
        "batch_size": 0.0,
        "lookup_available": 0.0,  # the generation's drafters have no n-gram lookup
        "lookup_order": 0.0,
        "acceptance_draft": 5 / 9,  # every step was the draft's
        "drafter_draft": 1.0,
        # the verification's line over (tokens verified, seconds): (5, .010), (5, .010), (1, .008), (2, .009)
        "draft_price": (0.010 / 10) / (FIXED + PER_TOKEN),
        "verify_token_price": PER_TOKEN / (FIXED + PER_TOKEN),
        **{f"verify_step_{t}": 0.0 for t in range(2, 10)},  # no prior: no curve to read
        "priced_k": PRICED_K / 16,  # at acceptance_prob_short, under the fitted line (no prior)
        **{f"{kind}_{d}": 0.0 for kind in ("acceptance", "drafter") for d in FEATURE_DRAFTERS[1:]},
    }
    assert set(expected) == set(FEATURE_NAMES)
    for name, value in expected.items():
        assert values[name] == pytest.approx(value, abs=1e-6), name


# least squares of (5, .010), (5, .010), (1, .008), (2, .009) by hand: n = 4, sums 13, .037, 55, .126
PER_TOKEN = (4 * 0.126 - 13 * 0.037) / (4 * 55 - 13**2)
FIXED = (0.037 - PER_TOKEN * 13) / 4
# a = 5.25 / 9, k tokens cost 1 + (draft_price + verify_token_price) k = 1 + 0.176 k one-token
# verifications: 1.35 tokens per one at k = 1, 1.42 at k = 2, 1.39 at k = 3
PRICED_K = 2


def test_prices_read_the_machine_not_its_speed_and_follow_the_batch():
    """A verification of ``fixed + per_token * tokens`` seconds gives the documented prices at
    any absolute speed; a batch of B rows is priced per row of it; a window where every step
    verified as many tokens keeps the last fit."""

    def history(scale: float, rows: int = 1) -> FeatureTracker:
        tracker = FeatureTracker(replace(SETTINGS, batch_size=rows), prompt_length=50)
        for k in [0, 4, 2, 6, 3, 0, 1, 5]:
            row = step(
                k,
                k,
                k // 2,
                [0.9] * k,
                draft_s=scale * 0.001 * k,
                verify_s=scale * (0.008 + 0.001 * rows * (k + 1)),
            )
            tracker.update([replace(row, context_length=50) for _ in range(rows)])
        return tracker

    one_token = 0.008 + 0.001  # fixed + per_token x 1 row
    values = features(history(1.0))
    assert values["verify_token_price"] == pytest.approx(0.001 / one_token)
    assert values["draft_price"] == pytest.approx(0.001 / one_token)  # 1 ms per draft forward
    assert features(history(7.0)) == pytest.approx(values)  # a machine 7x slower: the same prices
    batch = features(history(1.0, rows=4))  # 4 rows: the line is over every row's tokens
    assert batch["verify_token_price"] == pytest.approx(4 * 0.001 / (0.008 + 4 * 0.001))
    flat = FeatureTracker(SETTINGS, prompt_length=50)
    for _ in range(40):  # k never changes: the slope is not identified, nothing is made up
        flat.update([step(4, 4, 2, [0.9] * 4, draft_s=0.004, verify_s=0.02)])
    assert features(flat)["verify_token_price"] == 0.0 and features(flat)["draft_price"] == 0.0
    tracker = history(1.0)
    for _ in range(40):  # then the last fit stands
        tracker.update([step(4, 4, 2, [0.9] * 4, draft_s=0.004, verify_s=0.013)])
    assert features(tracker)["verify_token_price"] == pytest.approx(values["verify_token_price"])


def test_a_prior_line_gives_prices_a_constant_k_cannot_and_yields_to_steps_that_vary():
    """The latency model's line is the prior: before any step the prices are its own; steps of
    one token count keep its shape, at the measured seconds (a machine twice as slow as the prior's
    reads the same ratios); steps that vary their tokens move the line to theirs."""
    model = LatencyModel.from_cost_model(CostModel(0.001, 0.010, 0.002))  # verify .010 + .002 (n - 1)
    prior = model.price_line()
    assert prior[:3] == pytest.approx((0.001, 0.008, 0.002))  # per fed token .002, fixed .010 - .002
    tracker = FeatureTracker(SETTINGS, prompt_length=50, prices=model.price_line)
    assert features(tracker)["verify_token_price"] == pytest.approx(0.002 / 0.010)
    assert features(tracker)["draft_price"] == pytest.approx(0.001 / 0.010)
    for _ in range(40):  # a static k = 4 on a machine twice as slow: 2 x (.010 + .002 x 4)
        tracker.update([step(4, 4, 2, [0.9] * 4, draft_s=4 * 0.002, verify_s=2 * 0.018)])
    assert features(tracker)["verify_token_price"] == pytest.approx(0.002 / 0.010)
    assert features(tracker)["draft_price"] == pytest.approx(0.002 / 0.020)  # measured, over 2 x .010
    for k in [0, 4, 2, 6, 3, 0, 1, 5] * 4:  # then a machine whose verification is flatter: .008 + .0005 n
        tracker.update([step(k, k, k // 2, [0.9] * k, draft_s=0.001 * k, verify_s=0.008 + 0.0005 * (k + 1))])
    data = 0.0005 / 0.0085
    assert features(tracker)["verify_token_price"] == pytest.approx(data, rel=0.05)
    assert abs(features(tracker)["verify_token_price"] - data) < 0.1 * abs(0.2 - data)


def test_the_shape_features_read_the_priors_curve_token_by_token():
    """A staircase (the 4th token costs a step) shows in its own feature, where the line's two
    prices would only see a steeper line; a machine that is the same shape but slower reads the
    same; without a prior the shape is 0, and a batch reads the curve at its rows."""
    seconds = [0.010, 0.0105, 0.011, 0.013, 0.0135, 0.014, 0.0145, 0.015, 0.0155]
    staircase = PriceLine(0.001, 0.0095, 0.0005, tuple(seconds))
    expected = [0.0005 / 0.010 / STEP_NORM] * 8
    expected[2] = 0.002 / 0.010 / STEP_NORM
    assert staircase.shape() == pytest.approx(expected)
    tracker = FeatureTracker(SETTINGS, prompt_length=50, prices=lambda rows, context: staircase)
    shape = [features(tracker)[f"verify_step_{t}"] for t in range(2, 10)]
    assert shape == pytest.approx(expected) and shape[2] > 3 * shape[1]
    slower = PriceLine(0.003, 0.0285, 0.0015, tuple(3 * s for s in seconds))
    assert slower.shape() == pytest.approx(staircase.shape())
    assert PriceLine(0.001, 0.01, 0.001, (0.01, 0.011)).shape() == pytest.approx(
        [0.1 / STEP_NORM] * 8
    )  # repeats
    assert all(
        features(FeatureTracker(SETTINGS, prompt_length=50))[f"verify_step_{t}"] == 0 for t in range(2, 10)
    )
    asked = []
    model = LatencyModel.from_cost_model(CostModel(0.001, 0.010, 0.002))
    tracker = FeatureTracker(
        SETTINGS, prompt_length=50, prices=lambda rows, c: asked.append(rows) or model.price_line(rows, c)
    )
    tracker.update([step(2, 2, 1, [0.9, 0.8])] * 3)  # three rows
    assert asked[-1] == 3
    assert tracker.shape == pytest.approx(model.price_line(3, tracker.context_length).shape())


def test_priced_k_is_the_k_with_the_most_expected_tokens_per_second():
    """A brute force over k of (1 + a + ... + a^k) / (draft_price k + c(k + 1) / c(1)); a staircase
    at the 4th token caps k where the line through the same curve's ends does not; no acceptance
    yet: 0; without a curve, the fitted line prices it."""
    seconds = [0.010, 0.0105, 0.011, 0.013, 0.0135, 0.014, 0.0145, 0.015, 0.0155]
    staircase = PriceLine(0.0014, 0.0095, 0.0005, tuple(seconds))
    tracker = FeatureTracker(SETTINGS, prompt_length=50, prices=lambda rows, context: staircase)
    assert features(tracker)["priced_k"] == 0.0
    line = [seconds[0] + (seconds[-1] - seconds[0]) * t / 8 for t in range(9)]
    for acceptance in (0.5, 0.6, 0.7, 0.8, 0.95):
        tracker.history["acceptance_prob_short"] = acceptance
        for curve in (seconds, line):
            tracker.curve = [c / curve[0] for c in curve]

            def rate(k, curve=curve, acceptance=acceptance):
                return sum(acceptance**i for i in range(k + 1)) / (0.14 * k + curve[k] / curve[0])

            assert tracker.priced_k(0.14, 0.0) == max(range(9), key=rate)
    tracker.history["acceptance_prob_short"] = 0.7
    tracker.curve = [c / seconds[0] for c in seconds]
    stepped = tracker.priced_k(0.14, 0.0)
    tracker.curve = [c / line[0] for c in line]
    assert stepped == 2 < tracker.priced_k(0.14, 0.0)  # the step at the 4th token: k = 2
    tracker.curve = None
    chosen = [tracker.priced_k(0.14, price) for price in (0.0, 0.1, 1.0)]
    for price, k in zip((0.0, 0.1, 1.0), chosen, strict=True):
        rates = [sum(0.7**i for i in range(j + 1)) / (0.14 * j + 1 + price * j) for j in range(9)]
        assert k == rates.index(max(rates))
    assert chosen == sorted(chosen, reverse=True) and chosen[0] > chosen[-1]  # dearer tokens: shorter drafts


def test_pool_features_follow_each_drafter_and_the_lookup():
    match = [(5, 3)]  # (tokens the lookup could propose, the order of its match)
    settings = replace(SETTINGS, drafters=("draft", "ngram"))
    tracker = FeatureTracker(settings, prompt_length=50, lookup=lambda: match[0])
    assert features(tracker)["lookup_available"] == pytest.approx(5 / 16)
    assert features(tracker)["lookup_order"] == pytest.approx(1.0)  # a trigram match
    assert all(features(tracker)[f"drafter_{d}"] == 0.0 for d in FEATURE_DRAFTERS)  # no step yet
    tracker.update([step(4, 4, 2, [1.0] * 4, drafter="ngram")])
    tracker.update([step(4, 4, 4, [0.9] * 4, drafter="draft")])
    tracker.update([step(4, 0, 0, [], drafter="ngram", stopped=True)])  # the lookup found nothing
    match[0] = (40, 1)
    values = features(tracker)
    assert values["acceptance_ngram"] == pytest.approx(2 / 4)  # the empty step does not count
    assert values["acceptance_draft"] == pytest.approx(1.0)
    assert values["acceptance_short"] == pytest.approx(6 / 8)  # both drafters' steps
    assert values["drafter_ngram"] == 1.0 and values["drafter_draft"] == 0.0
    assert values["lookup_available"] == 1.0  # 40 / 16, clipped
    assert values["lookup_order"] == pytest.approx(1 / 3)  # a single token matched
    for _ in range(4):  # the window of a drafter is its own last 4 proposing steps
        tracker.update([step(2, 2, 0, [1.0] * 2, drafter="ngram")])
    assert features(tracker)["acceptance_ngram"] == 0.0
    assert features(tracker)["acceptance_draft"] == pytest.approx(1.0)
    # without ngram among the drafters the lookup is never asked
    silent = FeatureTracker(SETTINGS, prompt_length=50, lookup=lambda: 1 / 0)
    assert features(silent)["lookup_available"] == 0.0 and features(silent)["lookup_order"] == 0.0


def test_feature_versions_are_prefixes_and_name_every_drafter():
    from specrl.engine.drafters import DRAFTERS

    assert FEATURE_DRAFTERS == DRAFTERS  # a new drafter is a new feature version
    assert FEATURE_COUNTS[FEATURE_VERSION] == N_FEATURES
    assert sorted(FEATURE_COUNTS.values()) == list(FEATURE_COUNTS.values())
    assert FEATURE_NAMES[: FEATURE_COUNTS[1]][-1] == "batch_size"  # version 1's last feature
    assert FEATURE_NAMES[: FEATURE_COUNTS[2]][-1] == "drafter_cascade"  # version 2's last feature


def test_short_window_forgets_and_long_window_remembers():
    tracker = FeatureTracker(SETTINGS, prompt_length=10)
    for _ in range(4):
        tracker.update([step(4, 4, 0, [0.5] * 4)])
    for _ in range(4):
        tracker.update([step(4, 4, 4, [0.9] * 4)])
    values = features(tracker)
    assert values["acceptance_short"] == 1.0
    assert values["acceptance_long"] == pytest.approx(0.5)


def test_every_feature_stays_finite_and_in_range_on_random_and_extreme_histories():
    rng = random.Random(0)
    settings = GenerationSettings(50, 64, 2, temperature=5.0, batch_size=1024)
    tracker = FeatureTracker(settings, prompt_length=60)
    for _ in range(300):
        k = rng.choice([0, 1, 3, 8, 40])
        proposed = rng.randint(0, k)
        accepted = rng.randint(0, proposed)
        tracker.update(
            [
                step(
                    k,
                    proposed,
                    accepted,
                    [rng.random() for _ in range(proposed + rng.randint(0, 1) if k else 0)],
                    entropies=None,
                    tau=rng.random(),
                    draft_s=rng.choice([0.0, 1e-4, 5.0]),
                    verify_s=rng.choice([0.0, 1e-3, 1e-9]),
                    context=rng.randint(1, 500),
                    stopped=rng.random() < 0.3,
                )
            ]
        )
        vector = tracker.vector()
        assert np.isfinite(vector).all() and (vector >= 0).all() and (vector <= 1).all()


def test_reset_forgets_the_history():
    tracker = FeatureTracker(SETTINGS, prompt_length=50)
    fresh = tracker.vector()
    tracker.update([step(4, 4, 2, [0.9, 0.8, 0.3, 0.2], draft_s=0.004)])
    assert not np.array_equal(tracker.vector(), fresh)
    tracker.reset(SETTINGS, prompt_length=50)
    assert np.array_equal(tracker.vector(), fresh)


class Recording:
    """Wraps a controller and records what it was shown and what it chose."""

    def __init__(self, inner) -> None:
        self.inner, self.observations, self.actions = inner, [], []

    def reset(self) -> None:
        self.inner.reset()
        self.observations, self.actions = [], []

    def act(self, observation):
        self.observations.append(np.array(observation, copy=True))
        self.actions.append(self.inner.act(observation))
        return self.actions[-1]

    def observe(self, result) -> None:
        self.inner.observe(result)


def test_decoder_gives_the_controller_the_feature_vector_of_its_history(pair):
    controller = Recording(specrl.TCPController())
    out = specrl.SpeculativeDecoder(pair, controller).generate(
        prompts(1, pair.vocab_size)[0], max_new_tokens=30, stop_at_eos=False
    )
    assert len(controller.observations) == len(out.steps)
    settings = GenerationSettings(
        max_new_tokens=30, context_window=pair.context_length, vocab_size=pair.vocab_size, temperature=0.0
    )
    tracker = FeatureTracker(settings, prompt_length=len(out.prompt_ids))
    for observation, result in zip(controller.observations, out.steps, strict=True):
        assert observation.shape == (N_FEATURES,)
        assert np.array_equal(observation, tracker.vector())
        tracker.update([result])


@pytest.fixture
def counting_clock(monkeypatch):
    """Every clock reading advances by exactly 1: measured times become reproducible."""
    ticks = itertools.count()
    monkeypatch.setattr(DeviceClock, "now", lambda self: float(next(ticks)))


def test_env_and_decoder_show_a_controller_identical_observations_and_get_identical_actions(
    tiny_home, counting_clock
):
    _, pair = tiny_home
    scenario = replace(specrl.load_scenario("code_t1"), max_new_tokens=40)
    # rho from a constant model: the fake clock must not be calibrated into the session's cache
    latency = LatencyModel.from_cost_model()
    env = specrl.SpecDecodeEnv(scenario, pair=pair, time="wallclock", latency=latency)
    in_env = Recording(specrl.TCPController())
    summary = run_episode(env, in_env, seed=3)
    _, info = env.reset(seed=3)

    in_decoder = Recording(specrl.TCPController())  # the same prior of the price features
    out = specrl.SpeculativeDecoder(pair, in_decoder, prices=latency.price_line).generate(
        info["prompt"], max_new_tokens=40, temperature=1.0, seed=info["generation_seed"]
    )
    assert summary.tokens == out.stats.new_tokens and summary.steps == len(out.steps) > 5
    assert in_env.actions == in_decoder.actions
    assert len({a.k for a in in_env.actions}) > 1, "the controller adapted, so the history mattered"
    for seen_by_env, seen_by_decoder in zip(in_env.observations, in_decoder.observations, strict=True):
        assert np.array_equal(seen_by_env, seen_by_decoder)
