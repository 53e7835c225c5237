"""Controllers follow their rules exactly on scripted outcomes, and never change what is decoded."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from conftest import prompts, reference_greedy

import specrl
from specrl.controllers import (
    Controller,
    HFConfidenceController,
    HFHeuristicController,
    StaticController,
    TCPController,
)
from specrl.controllers.hf_rules import min_cost_threshold, roc_curve
from specrl.engine.types import Action, StepResult


def outcome(accepted: int, proposed: int, confidences: list[float] | None = None) -> StepResult:
    """A verification that proposed ``proposed`` draft tokens and accepted the first ``accepted``."""
    return StepResult(
        action=Action(proposed, 0.0),
        k=proposed,
        proposed=proposed,
        accepted=accepted,
        emitted=accepted + 1,
        draft_seconds=0.0,
        verify_seconds=0.0,
        confidences=confidences if confidences is not None else [0.9] * proposed,
    )


def k_sequence(controller, outcomes: list[tuple[int, int]]) -> list[int]:
    """The k the controller asks for after each scripted (accepted, proposed) outcome."""
    ks = []
    for accepted, proposed in outcomes:
        controller.observe(outcome(accepted, proposed))
        ks.append(controller.act(None).k)
    return ks


# --- TCP ----------------------------------------------------------------------------------------------


def test_tcp_exact_k_sequence_with_window_and_both_bounds():
    tcp = TCPController(window=3)  # low 0.7, high 0.85, step 1, k in [1, 8], starts at 5
    assert tcp.act(None) == Action(5, 0.0)
    script = [
        ((5, 5), 6),  # window rate 1.0 > 0.85: up
        ((6, 6), 7),
        ((7, 7), 8),
        ((8, 8), 8),  # would be 9: clamped at k_max
        ((2, 8), 8),  # this step alone is 0.25, but the window (7,7)(8,8)(2,8) is 17/23 = 0.74: stay
        ((0, 8), 7),  # window (8,8)(2,8)(0,8): 10/24 < 0.7: down
        ((0, 7), 6),  # 2/23
        ((0, 0), 6),  # nothing proposed: no evidence, no change
        ((0, 6), 5),
        ((0, 5), 4),
        ((0, 4), 3),
        ((0, 3), 2),
        ((0, 2), 1),
        ((0, 1), 1),  # would be 0: clamped at k_min
        ((1, 1), 1),  # window (0,2)(0,1)(1,1): 1/4: down, clamped
        ((1, 1), 1),  # (0,1)(1,1)(1,1): 2/3 < 0.7 still
        ((1, 1), 2),  # 3/3: up
        ((1, 2), 2),  # (1,1)(1,1)(1,2): 3/4, inside [0.7, 0.85]: stay
    ]
    assert k_sequence(tcp, [step for step, _ in script]) == [k for _, k in script]


def test_tcp_steps_without_proposals_neither_enter_the_window_nor_move_k():
    tcp = TCPController(window=2)
    assert k_sequence(tcp, [(1, 5), (0, 0)]) == [4, 4]
    # The window is still (1,5) then (4,4): 5/9 < 0.7. Had the empty step taken a slot, it would be 4/4.
    assert k_sequence(tcp, [(4, 4)]) == [3]
    assert tcp.acceptance_rate == pytest.approx(5 / 9)


def test_tcp_window_is_not_cleared_when_k_changes():
    tcp = TCPController(window=8)
    # One bad verification keeps pulling k down while it stays in the window.
    assert k_sequence(tcp, [(0, 5), (4, 4), (3, 3)]) == [4, 3, 2]  # rates 0, 4/9, 7/12


def test_tcp_parameters_are_honoured():
    tcp = TCPController(window=4, low=0.5, high=0.6, step=2, k_min=2, k_max=6, initial_k=4, tau=0.1)
    assert tcp.act(None) == Action(4, 0.1)
    # 3/5 = 0.6 is not above high (strict); 8/10 is; 8/14 is neither; 8/17 is below low.
    assert k_sequence(tcp, [(3, 5), (5, 5), (0, 4), (0, 3), (0, 6)]) == [4, 6, 6, 4, 2]


def test_tcp_reset_restores_the_initial_state():
    tcp = TCPController(window=3)
    k_sequence(tcp, [(0, 5), (0, 4), (0, 3)])
    assert tcp.act(None).k == 2
    tcp.reset()
    assert tcp.act(None) == Action(5, 0.0)
    assert tcp.acceptance_rate is None
    assert k_sequence(tcp, [(5, 5)]) == [6]  # the old rejections are forgotten


def test_tcp_confidence_cut_variant_and_names():
    plain, cut = TCPController(), TCPController.with_confidence_cut()
    assert plain.act(None) == Action(5, 0.0) and plain.name == "tcp"
    assert cut.act(None) == Action(5, 0.25) and cut.name == "tcp-tau0.25"
    k_sequence(cut, [(0, 5)])
    assert cut.act(None) == Action(4, 0.25)  # tau is fixed
    assert TCPController.with_confidence_cut(window=2).window == 2
    assert "tau=0.25" in repr(cut)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"window": 0},
        {"low": 0.9, "high": 0.8},
        {"step": 0},
        {"k_min": 0},
        {"initial_k": 9},
        {"k_min": 6},
        {"tau": 1.5},
    ],
)
def test_tcp_rejects_invalid_parameters(kwargs):
    with pytest.raises(ValueError):
        TCPController(**kwargs)


# --- HF heuristic -------------------------------------------------------------------------------------


def test_hf_heuristic_exact_k_sequence():
    hf = HFHeuristicController(num_assistant_tokens=3, k_max=8)
    assert hf.act(None) == Action(3, 0.0)
    script = [
        ((3, 3), 5),  # every drafted token accepted: +2
        ((5, 5), 7),
        ((7, 7), 8),  # would be 9: capped at k_max
        ((7, 8), 7),  # one rejection: -1
        ((0, 7), 6),
        ((2, 6), 5),
        ((0, 5), 4),
        ((0, 4), 3),
        ((0, 3), 2),
        ((0, 2), 1),
        ((0, 1), 1),  # floor 1
        ((0, 0), 1),  # nothing proposed: unchanged
        ((1, 1), 3),
        ((2, 2), 5),  # fewer than k proposed (budget or tau), all accepted: still +2
    ]
    assert k_sequence(hf, [step for step, _ in script]) == [k for _, k in script]


def test_hf_heuristic_defaults_cap_and_persistence():
    assert HFHeuristicController().act(None) == Action(8, 0.0)  # HF's 20, capped at k_max 8
    uncapped = HFHeuristicController(k_max=None)
    assert k_sequence(uncapped, [(20, 20), (22, 22)]) == [22, 24]  # HF itself has no cap
    transient = HFHeuristicController(num_assistant_tokens=4)
    k_sequence(transient, [(0, 4)])
    transient.reset()
    assert transient.act(None).k == 4
    persistent = HFHeuristicController(num_assistant_tokens=4, persist_across_generations=True)
    k_sequence(persistent, [(0, 4)])
    persistent.reset()
    assert persistent.act(None).k == 3  # HF "heuristic": k carries over to the next generation
    assert HFHeuristicController(tau=0.3).act(None).tau == 0.3
    assert HFHeuristicController().name == "hf-heuristic"


# --- HF confidence: the ROC machinery -----------------------------------------------------------------


def brute_force_rates(labels, scores, threshold) -> tuple[Fraction, Fraction]:
    """Exact (fpr, fnr) of "positive when score >= threshold", by counting."""
    positives = [s for s, y in zip(scores, labels, strict=True) if y == 1]
    negatives = [s for s, y in zip(scores, labels, strict=True) if y == 0]
    false_positives = sum(1 for s in negatives if s >= threshold)
    false_negatives = sum(1 for s in positives if s < threshold)
    return Fraction(false_positives, len(negatives)), Fraction(false_negatives, len(positives))


def random_history(rng: np.random.Generator, n: int) -> tuple[list[int], list[float]]:
    labels = [0, 1] + rng.integers(0, 2, n - 2).tolist()
    scores = np.round(rng.uniform(0, 1, n), 1).tolist()  # rounding makes ties between scores
    return labels, scores


def test_roc_curve_matches_sklearn_documented_example():
    # sklearn.metrics.roc_curve docstring: y = [1, 1, 2, 2] (pos_label=2), scores [0.1, 0.4, 0.35, 0.8].
    fpr, tpr, thresholds = roc_curve([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    np.testing.assert_allclose(fpr, [0, 0, 0.5, 0.5, 1])
    np.testing.assert_allclose(tpr, [0, 0.5, 0.5, 1, 1])
    np.testing.assert_allclose(thresholds, [np.inf, 0.8, 0.4, 0.35, 0.1])


@pytest.mark.parametrize("seed", range(20))
def test_roc_curve_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    labels, scores = random_history(rng, n=int(rng.integers(2, 40)))
    fpr, tpr, thresholds = roc_curve(labels, scores)
    assert thresholds[0] == np.inf and fpr[0] == 0 and tpr[0] == 0
    assert thresholds[1:].tolist() == sorted(set(scores), reverse=True)
    for threshold, fp_rate, tp_rate in zip(thresholds[1:], fpr[1:], tpr[1:], strict=True):
        expected_fpr, expected_fnr = brute_force_rates(labels, scores, threshold)
        assert fp_rate == pytest.approx(float(expected_fpr))
        assert tp_rate == pytest.approx(float(1 - expected_fnr))


@pytest.mark.parametrize("seed", range(20))
def test_min_cost_threshold_equals_brute_force(seed):
    labels, scores = random_history(np.random.default_rng(100 + seed), n=30)
    costs = {t: (lambda r: r[0] + 3 * r[1])(brute_force_rates(labels, scores, t)) for t in set(scores)}
    best = min(costs.values())
    chosen = min_cost_threshold(labels, scores)
    assert costs[chosen] == best
    # Ties go to the highest threshold; exact fractions let the test see ties that floats may blur.
    if sum(c == best for c in costs.values()) == 1:
        assert chosen == max(t for t, c in costs.items() if c == best)


def test_min_cost_threshold_breaks_ties_towards_the_highest_threshold():
    # Quarters are exact in binary: thresholds 0.7 and 0.2 both cost exactly 0.75.
    labels = [1, 1, 1, 1, 0, 0, 0, 0]
    scores = [0.9, 0.8, 0.7, 0.2, 0.6, 0.5, 0.4, 0.1]
    assert min_cost_threshold(labels, scores) == 0.7


def test_roc_curve_rejects_one_class_histories():
    with pytest.raises(ValueError):
        roc_curve([1, 1, 1], [0.2, 0.5, 0.9])
    with pytest.raises(ValueError):
        roc_curve([1, 0], [0.2])


# --- HF confidence: the controller --------------------------------------------------------------------


def test_hf_confidence_threshold_moves_to_the_roc_optimum():
    hf = HFConfidenceController()
    assert hf.act(None) == Action(8, 0.4)  # threshold 0.4; HF's 20 tokens capped at k_max 8
    hf.observe(outcome(3, 3, [0.9, 0.8, 0.7]))
    # The accepted token and the first rejected one are recorded; 0.45 and 0.99 came after the rejection.
    hf.observe(outcome(1, 4, [0.95, 0.5, 0.45, 0.99]))
    assert hf.history == ((0.9, 0.8, 0.7, 0.95, 0.5), (1, 1, 1, 1, 0))
    assert hf.act(None).tau == 0.4  # both labels seen, but only 5 samples: HF waits for 6
    # 0.3 is the position where tau stopped drafting: never proposed, so it has no outcome.
    hf.observe(outcome(1, 2, [0.6, 0.55, 0.3]))
    assert hf.history == ((0.9, 0.8, 0.7, 0.95, 0.5, 0.6, 0.55), (1, 1, 1, 1, 0, 1, 0))
    # Positives >= 0.6 > every negative: threshold 0.6 separates them (fpr = fnr = 0).
    assert hf.act(None) == Action(8, 0.6)
    # Four confident rejections: keeping 0.6 costs fpr 4/6; raising to 0.7 costs 3 * fnr = 3/5.
    for confidence in (0.61, 0.62, 0.63, 0.64):
        hf.observe(outcome(0, 1, [confidence]))
    assert hf.act(None) == Action(8, 0.7)
    assert hf.act(None).k == 8  # constant draft length


def test_hf_confidence_waits_for_both_labels_and_resets():
    hf = HFConfidenceController(initial_threshold=0.3, num_assistant_tokens=5)
    for _ in range(4):
        hf.observe(outcome(3, 3, [0.9, 0.8, 0.8]))
    assert hf.act(None) == Action(5, 0.3)  # 12 samples, all matched: no ROC curve yet
    hf.observe(outcome(0, 3, [0.75, 0.2, 0.2]))
    assert hf.act(None).tau == 0.8  # 0.75 is the only negative: cut at the lowest positive above it
    hf.reset()
    assert hf.act(None) == Action(5, 0.3)
    assert hf.history == ((), ())


def test_hf_confidence_with_heuristic_draft_length():
    hf = HFConfidenceController(num_assistant_tokens=4, heuristic_k=True)
    assert k_sequence(hf, [(4, 4), (2, 6), (0, 0)]) == [6, 5, 5]
    assert hf.name == "hf-confidence-heuristic"
    assert HFConfidenceController(k_max=None).act(None).k == 20


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_threshold": 0.0},
        {"initial_threshold": 1.2},
        {"num_assistant_tokens": 0},
        {"k_max": 0},
        {"false_negative_cost": 0},
    ],
)
def test_hf_confidence_rejects_invalid_parameters(kwargs):
    with pytest.raises(ValueError):
        HFConfidenceController(**kwargs)


# --- every controller, end to end ---------------------------------------------------------------------


CONTROLLERS = [  # (controller, its first action)
    (TCPController(), Action(5, 0.0)),
    (TCPController.with_confidence_cut(), Action(5, 0.25)),
    (HFHeuristicController(), Action(8, 0.0)),
    (HFConfidenceController(), Action(8, 0.4)),
    (HFConfidenceController(heuristic_k=True), Action(8, 0.4)),
]


@pytest.fixture(scope="module")
def greedy_case(pair):
    prompt = prompts(1, pair.vocab_size, seed=7)[0]
    return prompt, reference_greedy(pair.target, prompt, 32)


@pytest.mark.parametrize(("controller", "first_action"), CONTROLLERS, ids=[c.name for c, _ in CONTROLLERS])
def test_every_controller_decodes_exactly_the_plain_greedy_output(
    pair, greedy_case, controller, first_action
):
    assert isinstance(controller, Controller)
    prompt, expected = greedy_case
    decoder = specrl.SpeculativeDecoder(pair, controller)
    for _ in range(2):  # the second generation starts from a reset controller
        out = decoder.generate(prompt, max_new_tokens=len(expected), stop_at_eos=False)
        assert out.token_ids == expected
        assert out.steps[0].action == first_action


def test_adaptive_controllers_do_adapt_on_a_poor_draft(pair, greedy_case):
    prompt, expected = greedy_case
    for controller in (TCPController(), HFHeuristicController()):
        decoder = specrl.SpeculativeDecoder(pair, controller)
        out = decoder.generate(prompt, max_new_tokens=len(expected), stop_at_eos=False)
        ks = [step.action.k for step in out.steps]
        assert min(ks) < ks[0], f"{controller!r} never lowered k: {ks}"


def test_existing_exports_are_kept():
    assert specrl.controllers.StaticController is StaticController
    assert StaticController(3).act(None) == Action(3, 0.0)
