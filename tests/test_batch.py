"""The batched engine: ragged acceptance over one shared KV cache per model, lossless per row.

Greedy rows equal plain greedy decoding of their prompt alone and accept exactly what that
prompt accepts alone (no row is cut back to another's acceptance); sampled rows have the
target's law of their first two tokens (chi-square per row, with a power check); the cache
keeps, feeds, rolls back, packs and drops rows without a recompute; bad input is refused by name.
"""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import chi_square_p_value, exact_two_token_law, prompts, reference_greedy

import specrl
from specrl.engine import memory as memory_module
from specrl.engine import rejection as rejection_module
from specrl.engine.cache import KVCache
from specrl.engine.generation import Generation, PromptTooLongError
from specrl.engine.memory import BatchTooLargeError
from specrl.engine.sampling import SamplingConfig
from specrl.features import FEATURE_NAMES, FeatureTracker, GenerationSettings

GREEDY = SamplingConfig(0.0)


def ragged_prompts(vocab_size: int, n: int = 5, seed: int = 3) -> list[list[int]]:
    """Prompts of lengths 2, 5, 8, ...: every row pads differently."""
    return [p[: 2 + 3 * i] for i, p in enumerate(prompts(n, vocab_size, seed=seed))]


def decode(pair, prompt_ids, action, max_new_tokens, sampling=GREEDY, seed=0) -> Generation:
    generation = Generation(pair, prompt_ids, max_new_tokens, sampling, seed, stop_at_eos=False)
    while not generation.done:
        generation.step(action)
        for row in generation.active:  # each cache holds a prefix of its row: all but the last token
            i = generation.active.index(row)
            assert generation.target.lengths[i] == len(generation.tokens[row]) - 1
            assert generation.drafters["draft"].cache.lengths[i] <= len(generation.tokens[row]) - 1
    return generation


@pytest.mark.parametrize("k, tau", [(0, 0.0), (1, 0.0), (3, 0.0), (4, 0.35), (8, 0.0)])
def test_greedy_rows_equal_plain_greedy_and_accept_what_they_accept_alone(close_pair, k, tau):
    prompt_ids = ragged_prompts(close_pair.vocab_size)
    generation = decode(close_pair, prompt_ids, specrl.Action(k, tau), 24)
    for row, prompt in enumerate(prompt_ids):
        assert generation.output_ids(row) == reference_greedy(close_pair.target, prompt, 24), row
        alone = Generation(close_pair, [prompt], 24, GREEDY, stop_at_eos=False)
        while not alone.done:
            alone.step(specrl.Action(k, tau))
        # ragged acceptance: the row accepted, step by step, what the prompt accepts alone
        accepted_alone = [s.accepted for s in alone.row_steps(0)]
        assert [s.accepted for s in generation.row_steps(row)] == accepted_alone, row
        assert [s.proposed for s in generation.row_steps(row)] == [s.proposed for s in alone.row_steps(0)], (
            row
        )
    if k >= 3 and tau == 0.0:
        accepted = [[s.accepted for s in generation.row_steps(r)] for r in range(len(prompt_ids))]
        assert len({tuple(a[:3]) for a in accepted}) > 1  # the rows really accepted differently
        assert any(0 < a < k for row in accepted for a in row)


def test_one_token_prompts_batch_with_longer_ones(close_pair):
    """A one-token prompt has nothing to prefill: its prefill columns are all padding, a fully
    masked attention row, which must leave no NaN in the caches."""
    prompt_ids = [[5], ragged_prompts(close_pair.vocab_size, 3)[2], [7]]
    prefilled = Generation(close_pair, prompt_ids, 12, GREEDY)
    assert prefilled.target.holes() > 0.5  # the padding is still there
    for cache in prefilled.caches():
        layers = cache.cache.layers
        assert not any(torch.isnan(layer.keys).any() or torch.isnan(layer.values).any() for layer in layers)
    generation = decode(close_pair, prompt_ids, specrl.Action(3), 12)
    for row, prompt in enumerate(prompt_ids):
        assert generation.output_ids(row) == reference_greedy(close_pair.target, prompt, 12), row


@pytest.mark.parametrize("k", [0, 3])
def test_rows_that_join_a_running_batch_decode_as_they_would_alone(close_pair, k):
    """Continuous batching: prompts admitted after some steps (one-token ones among them, and
    after every row has left) join the caches and decode, step by step, as they would alone;
    the rows already there are unaffected."""
    vocab = close_pair.vocab_size
    first, later = ragged_prompts(vocab, 2), ragged_prompts(vocab, 4, seed=8)
    waves = {0: first, 2: [later[3], [11]], 5: [later[1]], 60: [[4], later[2]]}  # step -> prompts
    generation = Generation(close_pair, waves[0], 16, GREEDY, stop_at_eos=False)
    for step in range(1, 100):
        if step in waves:
            assert generation.done == (step == 60)  # the last wave comes after every row has left
            generation.add(waves[step], max_new_tokens=16 if step < 60 else 8)
        if not generation.done:
            generation.step(specrl.Action(k))
            for i, row in enumerate(generation.active):
                assert int(generation.target.lengths[i]) == len(generation.tokens[row]) - 1
    assert generation.done
    admitted = [prompt for at in sorted(waves) for prompt in waves[at]]
    assert [generation.tokens[r][: generation.prompt_lengths[r]] for r in range(len(admitted))] == admitted
    for row, prompt in enumerate(admitted):
        budget = generation.budgets[row]
        assert generation.output_ids(row) == reference_greedy(close_pair.target, prompt, budget), row
        alone = Generation(close_pair, [prompt], budget, GREEDY, stop_at_eos=False)
        while not alone.done:
            alone.step(specrl.Action(k))
        accepted_alone = [s.accepted for s in alone.row_steps(0)]
        assert [s.accepted for s in generation.row_steps(row)] == accepted_alone, row
    assert max(step.batch_size for step in generation.steps) == 5  # rows really decoded together


def test_rows_leave_the_batch_when_their_room_ends_and_the_rest_go_on(close_pair):
    """A prompt near the context window finishes first; the others continue without it."""
    window = close_pair.context_length
    long_prompt = (prompts(1, close_pair.vocab_size, seed=9)[0] * window)[: window - 6]
    prompt_ids = [*ragged_prompts(close_pair.vocab_size, 3), long_prompt]
    generation = decode(close_pair, prompt_ids, specrl.Action(3), 20)
    assert len(generation.output_ids(3)) == 6  # the context window ended it
    assert any(3 in step.finished for step in generation.steps[:-1])
    assert generation.steps[-1].rows == [r for r in range(3) if r in generation.steps[-1].rows]
    for row, prompt in enumerate(prompt_ids):
        expected = reference_greedy(close_pair.target, prompt, len(generation.output_ids(row)))
        assert generation.output_ids(row) == expected, row
    assert [len(generation.output_ids(r)) for r in range(3)] == [20, 20, 20]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_batch_cache_holes_rollback_compaction_and_selection_match_a_recompute(close_pair, attention):
    model = copy.deepcopy(close_pair.target)  # the cache builds each kernel's 4D mask itself
    model.set_attn_implementation(attention)
    assert model.config._attn_implementation == attention
    rows = ragged_prompts(close_pair.vocab_size, 3)
    cache = KVCache(model, close_pair.vocab_size, rows=len(rows))
    width = max(map(len, rows))
    ids = torch.tensor([row + [0] * (width - len(row)) for row in rows])
    cache.feed(ids, [len(row) for row in rows])
    sequences = [list(row) for row in rows]

    def check(logits: torch.Tensor, order: list[int]) -> None:
        for i, r in enumerate(order):
            expected = KVCache(model, close_pair.vocab_size).feed(torch.tensor([sequences[r]]))
            assert torch.allclose(logits[i, -1], expected[0, -1], atol=1e-5), r

    # ragged feeds: 3, 1 and 2 tokens, then keep 1, 1 and 0 of them
    new = [[5, 6, 7], [8], [9, 10]]
    cache.feed(torch.tensor([x + [0] * (3 - len(x)) for x in new]), [len(x) for x in new])
    keep = [1, 1, 0]
    for r in range(3):
        sequences[r] += new[r][: keep[r]]
    cache.rollback([len(s) for s in sequences])
    assert cache.lengths == [len(s) for s in sequences] and cache.holes() > 0
    for r in range(3):
        sequences[r].append(11)
    check(cache.feed(torch.tensor([[11], [11], [11]])), [0, 1, 2])
    assert cache.compact(threshold=0.0) and cache.holes() < 0.5
    for r in range(3):
        sequences[r].append(12)
    check(cache.feed(torch.tensor([[12], [12], [12]])), [0, 1, 2])
    cache.select([2, 0])  # row 1 left; the order may change
    for r in (2, 0):
        sequences[r].append(13)
    check(cache.feed(torch.tensor([[13], [13]])), [2, 0])


@pytest.mark.parametrize("k", [1, 3])
def test_sampled_rows_have_the_targets_law_of_their_first_two_tokens(small_vocab_pair, k):
    """36 cells of (t1, t2) per row, 1200 batched generations of three ragged rows."""
    sampling = SamplingConfig(1.0)
    prompt_ids = ragged_prompts(small_vocab_pair.vocab_size, 3, seed=5)
    counts = batched_two_token_counts(small_vocab_pair, prompt_ids, k, sampling, n=1200)
    for row, prompt in enumerate(prompt_ids):
        law = exact_two_token_law(small_vocab_pair, prompt, sampling)
        assert chi_square_p_value(counts[row], law) > 1e-3, row


def test_chi_square_catches_a_batch_that_resamples_a_rejection_from_p(small_vocab_pair, monkeypatch):
    """Power: the wrong correction after a rejection (p instead of norm(max(0, p - q))) fails."""
    monkeypatch.setattr(rejection_module, "residual", lambda p, q: p)
    sampling = SamplingConfig(1.0)
    prompt_ids = ragged_prompts(small_vocab_pair.vocab_size, 2, seed=5)
    counts = batched_two_token_counts(small_vocab_pair, prompt_ids, 2, sampling, n=1200)
    law = exact_two_token_law(small_vocab_pair, prompt_ids[1], sampling)
    assert chi_square_p_value(counts[1], law) < 1e-3


def batched_two_token_counts(pair, prompt_ids, k, sampling, n) -> list[torch.Tensor]:
    """Per row, (V, V) counts of its first two tokens over ``n`` batched generations (seeds 0..n-1)."""
    counts = [torch.zeros(pair.vocab_size, pair.vocab_size) for _ in prompt_ids]
    for seed in range(n):
        generation = Generation(pair, prompt_ids, k + 1, sampling, seed, stop_at_eos=False)
        while not all(len(generation.output_ids(r)) >= 2 for r in range(len(prompt_ids))):
            generation.step(specrl.Action(k))
        for row in range(len(prompt_ids)):
            t1, t2 = generation.output_ids(row)[:2]
            counts[row][t1, t2] += 1
    return counts


def test_the_decoder_takes_a_list_of_prompts_and_returns_one_output_each(close_pair):
    decoder = specrl.SpeculativeDecoder(close_pair, specrl.TCPController())
    prompt_ids = ragged_prompts(close_pair.vocab_size, 3)
    outputs = decoder.generate(prompt_ids, max_new_tokens=16, stop_at_eos=False)
    assert isinstance(outputs, list) and len(outputs) == 3
    for output, prompt in zip(outputs, prompt_ids, strict=True):
        assert output.prompt_ids == prompt
        assert output.token_ids == reference_greedy(close_pair.target, prompt, 16)
        assert output.stats.new_tokens == 16 and output.stats.steps == len(output.steps)
    assert outputs.stats.new_tokens == 48 and outputs.stats.tokens_per_s > 0
    assert outputs.stats.steps == max(output.stats.steps for output in outputs)
    single = decoder.generate(prompt_ids[0], max_new_tokens=16, stop_at_eos=False)  # one prompt: one output
    assert single.token_ids == outputs[0].token_ids
    learned = specrl.SpeculativeDecoder(close_pair, specrl.LearnedController.load("default"))
    outputs = learned.generate(prompt_ids, max_new_tokens=12, stop_at_eos=False)  # a policy acts per batch
    assert [o.token_ids for o in outputs] == [reference_greedy(close_pair.target, p, 12) for p in prompt_ids]
    assert {s.action.k for o in outputs for s in o.steps} != {0}  # it speculated


def test_batched_features_treat_the_batch_as_one_step():
    settings = GenerationSettings(max_new_tokens=100, context_window=200, vocab_size=64, batch_size=2)
    tracker = FeatureTracker(settings, prompt_length=10)
    action = specrl.Action(4)
    rows = [
        specrl.StepResult(action, 4, 4, 1, 2, 0.01, 0.03, [0.9, 0.5, 0.4, 0.3], [0.1] * 4, context_length=10),
        specrl.StepResult(action, 4, 2, 2, 3, 0.01, 0.03, [0.8, 0.7, 0.2], [0.2] * 3, context_length=12,
                          stopped_by_tau=True),
    ]  # fmt: skip
    tracker.update(rows)
    values = dict(zip(FEATURE_NAMES, tracker.vector(), strict=True))
    assert values["acceptance_short"] == pytest.approx(3 / 6)  # the batch's acceptance
    assert values["last_proposed"] == pytest.approx(3 / 16) and values["last_accepted"] == pytest.approx(
        1.5 / 16
    )
    assert values["confidence_min"] == pytest.approx(0.2)
    assert values["rejected_confidence"] == pytest.approx(0.5)  # only row 0 rejected one
    assert values["last_stopped_by_tau"] == pytest.approx(0.5)
    assert values["batch_size"] == pytest.approx(1 / 8)  # log2(2) / 8
    assert values["progress"] == pytest.approx(2.5 / 100)  # mean tokens per row
    tracker.update(rows[:1])  # a row left
    assert dict(zip(FEATURE_NAMES, tracker.vector(), strict=True))["batch_size"] == 0.0


def test_bad_batches_are_refused_by_name(close_pair, monkeypatch):
    decoder = specrl.SpeculativeDecoder(close_pair, specrl.StaticController(2))
    with pytest.raises(ValueError, match="list of prompts is empty"):
        decoder.generate_batch([])
    with pytest.raises(ValueError, match="prompt is empty: an empty list holds no token ids and no prompts"):
        decoder.generate([])
    with pytest.raises(ValueError, match="prompt 1 is empty"):
        Generation(close_pair, [[1, 2], []], 4, GREEDY)
    with pytest.raises(PromptTooLongError, match="prompt 1 has"):
        Generation(close_pair, [[1, 2], [1] * close_pair.context_length], 4, GREEDY)
    monkeypatch.setattr(memory_module, "free_bytes", lambda device: 10 * 2**20)
    with pytest.raises(BatchTooLargeError, match=r"at most \d+ rows fit"):
        Generation(close_pair, [[1, 2]] * 4096, 64, GREEDY)
    monkeypatch.undo()
    with pytest.raises(specrl.engine.DrafterError, match="unknown drafter 'medusa'; choose one of draft, "):
        Generation(close_pair, [[1, 2], [3, 4]], 4, GREEDY).step(specrl.Action(2, drafter="medusa"))
