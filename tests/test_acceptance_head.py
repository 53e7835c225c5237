"""The acceptance head (specrl/acceptance_head.py): hidden states aligned with the trace, metrics,
and a fit that learns from the hidden state."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import noisy_copy, random_llama
from transformers import DynamicCache

from specrl.acceptance import AcceptancePredictor
from specrl.acceptance_head import (
    AcceptanceHead,
    Candidate,
    Positions,
    draft_hidden_states,
    leave_one_domain_out,
    log_loss,
    trace_positions,
    weighted_auc,
)
from specrl.engine.cache import cache_keyword
from specrl.engine.sampling import SamplingConfig
from specrl.selfcheck import memory_pair
from specrl.traces import TraceSet
from specrl.traces.analysis import analyse_segment
from specrl.traces.format import Segment, Trace

VOCAB = 32


@torch.no_grad()
def test_hidden_states_match_a_step_by_step_forward():
    model = random_llama(VOCAB, seed=3)
    prompt, tokens = [1, 4, 9, 2, 7], [5, 11, 3, 8, 6, 2]
    hidden = draft_hidden_states(model, prompt, tokens)
    assert hidden.shape == (len(tokens), model.config.hidden_size)
    # step by step with a KV cache: the prompt, then one token at a time
    cache = {cache_keyword(model): DynamicCache(config=model.config)}
    out = model(torch.tensor([prompt]), **cache, output_hidden_states=True)
    for j, token in enumerate(tokens):
        step_hidden, step_logits = out.hidden_states[-1][0, -1], out.logits[0, -1]
        if j in (0, 3, len(tokens) - 1):
            torch.testing.assert_close(hidden[j], step_hidden, atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(model.lm_head(hidden[j]), step_logits, atol=1e-4, rtol=1e-4)
        out = model(torch.tensor([[token]]), **cache, output_hidden_states=True)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_trace_positions_line_up_with_a_recorded_segment(temperature):
    pair = memory_pair(random_llama(VOCAB, 0), noisy_copy(VOCAB, 0.8, seed=1), "cpu", torch.float32, "t")
    sampling = SamplingConfig(temperature=temperature)
    prompt_text = "w3 w1 w4 w1 w5"
    prompt_ids = pair.encode(prompt_text)
    trajectory = [9, 2, 6, 5, 3, 5, 8, 9]
    fields = analyse_segment(pair, sampling, prompt_ids, trajectory, 2, torch.Generator().manual_seed(0))
    segment = Segment(prompt_length=len(prompt_ids), budget=8, end=len(trajectory), eos=False, **fields)
    meta = {"k_max": 2, "sampling": {"temperature": temperature, "top_k": 0, "top_p": 1.0}}
    traces = TraceSet.from_traces([Trace("code", 1, 0, [segment])], meta)
    positions = trace_positions(traces, {"code": ["w0", prompt_text]}, pair)
    assert positions.hidden.shape == (len(trajectory), pair.draft.config.hidden_size)
    np.testing.assert_allclose(positions.target, fields["accept_prob"], rtol=1e-6)
    # a prompt of the same length but other tokens misaligns the states: the check refuses it
    with pytest.raises(ValueError, match="misaligned"):
        trace_positions(traces, {"code": ["w0", "w3 w1 w4 w1 w6"]}, pair)
    with pytest.raises(ValueError, match="encodes to"):
        trace_positions(traces, {"code": ["w0", "w3 w1"]}, pair)


def synthetic(n: int, seed: int, soft: bool = False, domain: str = "a") -> Positions:
    """Acceptance decided by a direction of the hidden state; confidence and entropy are noise."""
    rng = np.random.default_rng(seed)
    hidden = rng.normal(size=(n, 8)).astype(np.float32)
    margin = 3.0 * hidden[:, 0] - 2.0 * hidden[:, 1]
    target = 1.0 / (1.0 + np.exp(-margin)) if soft else (margin > 0).astype(np.float64)
    return Positions(
        hidden=hidden,
        confidence=rng.uniform(0.1, 1.0, n),
        entropy=rng.uniform(0.0, 3.0, n),
        target=target,
        trace=np.arange(n) // 20,
        domain=np.full(n, domain, dtype=object),
    )


@pytest.mark.parametrize("soft", [False, True])
def test_the_head_learns_what_the_confidence_only_predictor_cannot(soft):
    train, test = synthetic(600, 0, soft), synthetic(400, 1, soft)
    confidence_only = AcceptancePredictor.fit(train.confidence, train.entropy, train.target)
    reference = log_loss(confidence_only.probabilities(test.confidence, test.entropy), test.target)
    head = AcceptanceHead.fit(train, l2=1e-3)
    assert log_loss(head.predict(test), test.target) < reference - (0.1 if soft else 0.4)
    assert weighted_auc(head.predict(test), test.target) > 0.9
    # a penalty large enough switches the hidden state off: the confidence-only predictor again
    shrunk = AcceptanceHead.fit(train, l2=1e6)
    assert log_loss(shrunk.predict(test), test.target) == pytest.approx(reference, abs=0.01)
    # a tiny MLP learns it too
    assert log_loss(AcceptanceHead.fit(train, l2=1e-3, hidden_units=4).predict(test), test.target) < reference


def test_leave_one_domain_out_scores_each_held_out_domain():
    train = Positions.concatenate([synthetic(200, 0, domain="a"), synthetic(200, 1, domain="b")])
    validation = Positions.concatenate([synthetic(100, 2, domain="a"), synthetic(100, 3, domain="b")])
    result = leave_one_domain_out(train, validation, [Candidate(0, 1e-3), Candidate(0, 1e6)], ["a", "b"])
    assert [row["candidate"] for row in result["rows"]] == ["linear l2=0.001", "linear l2=1e+06"]
    assert result["best"] == 0 and set(result["rows"][0]["per_domain"]) == {"a", "b"}
    assert len(np.unique(train.trace)) == 20  # traces of the two parts stay distinct


def test_weighted_auc_is_the_usual_auc_on_labels_and_weights_soft_ones():
    rng = np.random.default_rng(0)
    score, label = rng.normal(size=50).round(1), rng.integers(0, 2, 50).astype(float)
    pairs = [
        (s1 > s0) + 0.5 * (s1 == s0)
        for s1, y1 in zip(score, label, strict=True)
        for s0, y0 in zip(score, label, strict=True)
        if y1 > y0
    ]
    assert weighted_auc(score, label) == pytest.approx(np.mean(pairs))
    soft = rng.uniform(size=50)
    weights = np.outer(soft, 1 - soft)
    wins = (score[:, None] > score[None, :]) + 0.5 * (score[:, None] == score[None, :])
    assert weighted_auc(score, soft) == pytest.approx((weights * wins).sum() / weights.sum())
    assert np.isnan(weighted_auc(score, np.ones(50)))
