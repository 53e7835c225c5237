"""The engine is lossless: greedy outputs equal the target's, sampled outputs follow its law."""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import (
    chi_square_p_value,
    exact_two_token_law,
    prompts,
    reference_greedy,
    step_and_check_rollback,
    two_token_counts,
)

import specrl
from specrl.engine import rejection as rejection_module
from specrl.engine.sampling import SamplingConfig


def decode(pair, prompt, k, tau=0.0, n=24, **options):
    decoder = specrl.SpeculativeDecoder(pair, specrl.StaticController(k, tau))
    return decoder.generate(prompt, max_new_tokens=n, stop_at_eos=False, **options)


@pytest.mark.parametrize("prompt_index", range(4))
def test_greedy_equals_plain_target_greedy_for_every_k_and_tau(pair, prompt_index):
    prompt = prompts(4, pair.vocab_size, seed=11)[prompt_index]
    expected = reference_greedy(pair.target, prompt, 24)
    for k, tau in itertools.product(range(9), (0.0, 0.2, 0.5, 0.9)):
        out = decode(pair, prompt, k, tau)
        assert out.token_ids == expected, f"k={k} tau={tau}"


def test_greedy_rejections_happen_so_equality_is_not_trivial(pair):
    out = decode(pair, prompts(1, pair.vocab_size, seed=11)[0], k=4, n=48)
    assert 0 < out.stats.accepted < out.stats.proposed


def test_identical_draft_is_always_accepted(twin_pair):
    for temperature in (0.0, 1.0):
        out = decode(twin_pair, prompts(1, twin_pair.vocab_size)[0], k=5, n=40, temperature=temperature)
        assert out.stats.proposed > 0
        assert out.stats.acceptance_rate == 1.0
        assert all(s.emitted == s.proposed + 1 for s in out.steps)


def test_cached_logits_equal_full_recompute_after_accepts_and_rejections(pair):
    _, outcomes = step_and_check_rollback(pair, prompts(1, pair.vocab_size, seed=5)[0], 60)
    assert {(True, True), (False, True), (True, False)} <= outcomes  # accepts, rejects, plain steps


def test_tau_stops_drafting_on_low_confidence(pair):
    out = decode(pair, prompts(1, pair.vocab_size)[0], k=8, tau=0.999, n=30, temperature=1.0)
    assert all(s.proposed < 8 for s in out.steps)
    assert any(s.stopped_by_tau for s in out.steps)
    for s in out.steps:
        assert all(c >= 0.999 for c in s.confidences[: s.proposed])
        if s.stopped_by_tau:
            assert s.confidences[s.proposed] < 0.999


def test_budget_and_eos_are_respected(pair):
    prompt = prompts(1, pair.vocab_size)[0]
    for n in (1, 2, 7):
        assert decode(pair, prompt, k=8, n=n).stats.new_tokens == n
    out = specrl.SpeculativeDecoder(pair, specrl.StaticController(4)).generate(
        prompt, max_new_tokens=400, temperature=1.0, seed=1
    )
    assert pair.eos_token_id in out.token_ids, "a 6%-per-token EOS should appear in 400 tokens"
    assert out.token_ids[-1] == pair.eos_token_id and out.token_ids.count(pair.eos_token_id) == 1


def test_step_reports_timing_and_outcomes(pair):
    out = decode(pair, prompts(1, pair.vocab_size)[0], k=3, n=20, temperature=1.0)
    for s in out.steps:
        assert s.draft_seconds > 0 and s.verify_seconds > 0
        assert s.accepted_mask == [i < s.accepted for i in range(s.proposed)]
        assert len(s.acceptance_probs) == s.proposed
        assert all(0.0 <= a <= 1.0 for a in s.acceptance_probs)
    stats = out.stats
    assert stats.new_tokens == sum(s.emitted for s in out.steps)
    assert stats.tokens_per_step == pytest.approx(stats.new_tokens / stats.steps)


def test_counts_carry_vllm_names_and_definitions(twin_pair, pair):
    # an identical draft, greedy, k = 5 over 40 tokens: six steps of 5 drafted + 1, then the budget
    # leaves room for 3 drafted + 1; every drafted token is accepted
    stats = decode(twin_pair, prompts(1, twin_pair.vocab_size)[0], k=5, n=40).stats
    counts = (stats.steps, stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens)
    assert counts == (7, 7, 33, 33)
    assert stats.mean_acceptance_length == pytest.approx(1 + 33 / 7)  # vLLM: 1 + accepted / drafts
    # plain decoding drafts nothing: vLLM's length is 1, one token per step
    plain = decode(pair, prompts(1, pair.vocab_size)[0], k=0, n=10).stats
    assert (plain.steps, plain.num_drafts, plain.num_draft_tokens) == (10, 0, 0)
    assert plain.mean_acceptance_length == 1.0 and plain.tokens_per_step == 1.0
    # a confidence cut leaves steps that draft nothing: steps, but not drafts (seeded: 24 steps,
    # 5 of them drafted 6 tokens, all accepted); vLLM's length is not tokens per step
    out = decode(twin_pair, prompts(1, twin_pair.vocab_size)[0], k=4, tau=0.1, n=30, temperature=1.0, seed=0)
    stats = out.stats
    counts = (stats.steps, stats.num_drafts, stats.num_draft_tokens, stats.num_accepted_tokens)
    assert counts == (24, 5, 6, 6)
    names = {"num_drafts", "num_draft_tokens", "num_accepted_tokens", "tokens_per_step"}
    assert stats.num_drafts == sum(s.proposed > 0 for s in out.steps)
    assert stats.mean_acceptance_length == pytest.approx(2.2) and stats.tokens_per_step == pytest.approx(1.25)
    assert stats.to_dict()["mean_acceptance_length"] == pytest.approx(2.2)
    assert names <= set(stats.to_dict())


# ---------------------------------------------------------------------------------------------
# Sampling: the law of the first two emitted tokens equals the target's own sampling law.


@pytest.mark.slow
@pytest.mark.parametrize(
    "k,tau,sampling",
    [
        (1, 0.0, SamplingConfig(1.0)),
        (3, 0.0, SamplingConfig(1.0)),
        (3, 0.5, SamplingConfig(1.0)),
        (2, 0.0, SamplingConfig(0.7, top_k=4)),
        (4, 0.0, SamplingConfig(1.3, top_p=0.9)),
    ],
)
def test_speculative_sampling_matches_target_law(small_vocab_pair, k, tau, sampling):
    prompt = [1, 2, 3, 0, 4]
    counts = two_token_counts(small_vocab_pair, prompt, k, tau, sampling, n=1000)
    law = exact_two_token_law(small_vocab_pair, prompt, sampling)
    assert chi_square_p_value(counts, law) > 1e-3


@pytest.mark.slow
def test_chi_square_catches_resampling_from_p_instead_of_the_residual(small_vocab_pair, monkeypatch):
    """The test above has power: the classic bug (resample from p after a rejection) fails it."""
    monkeypatch.setattr(rejection_module, "residual", lambda p, q: p)
    prompt, sampling = [1, 2, 3, 0, 4], SamplingConfig(1.0)
    counts = two_token_counts(small_vocab_pair, prompt, 3, 0.0, sampling, n=1000)
    law = exact_two_token_law(small_vocab_pair, prompt, sampling)
    assert chi_square_p_value(counts, law) < 1e-3


def test_top_k_and_top_p_processing():
    logits = torch.tensor([[4.0, 3.0, 2.0, 1.0, 0.0]])
    probs = SamplingConfig(1.0, top_k=2).probs(logits)
    assert (probs[0, 2:] == 0).all() and probs[0, :2].sum() == pytest.approx(1.0)
    full = logits.softmax(-1)[0]
    probs = SamplingConfig(1.0, top_p=float(full[0] + full[1] * 0.5)).probs(logits)
    assert (probs[0, :2] > 0).all() and (probs[0, 2:] == 0).all()
    assert SamplingConfig(0.0).choose(SamplingConfig(0.0).probs(logits), None).item() == 0
