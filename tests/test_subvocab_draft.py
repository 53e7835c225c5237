"""A draft whose head covers part of the vocabulary (specrl.pretrained.subvocab) loads by path like
any draft, never proposes the other tokens, and leaves speculative decoding lossless: greedy
equality with the target, and the target's law of the first two sampled tokens."""

from __future__ import annotations

import pytest
import torch
from conftest import (
    chi_square_p_value,
    exact_two_token_law,
    random_llama,
    reference_greedy,
    save_model,
    two_token_counts,
    word_tokenizer,
)

import specrl
from specrl.engine.sampling import SamplingConfig
from specrl.pretrained.draft import make_draft
from specrl.pretrained.sources import DraftShape
from specrl.pretrained.subvocab import SubVocabLlamaForCausalLM

KEPT = [0, 2, 5]


@pytest.fixture(scope="module")
def subvocab_pair(tmp_path_factory) -> specrl.ModelPair:
    """Vocabulary of 6 (36 cells of two tokens); the draft is the target's first layer with head
    rows for tokens 0, 2 and 5 alone."""
    tmp = tmp_path_factory.mktemp("subvocab")
    tokenizer = word_tokenizer(6)
    target = random_llama(6, seed=0, sharpness=3.0)
    draft = make_draft(target, DraftShape(layers=1, kept=len(KEPT)), KEPT)
    return specrl.load_pair(
        target=save_model(tmp / "target", target, tokenizer),
        draft=save_model(tmp / "draft", draft, tokenizer),
        device="cpu",
    )


def test_it_loads_by_path_and_gives_the_other_tokens_probability_zero(subvocab_pair):
    assert isinstance(subvocab_pair.draft, SubVocabLlamaForCausalLM)
    q = subvocab_pair.draft(torch.tensor([[1, 3, 4]])).logits.softmax(-1)  # (1, 3, 6)
    assert q.shape == (1, 3, 6) and q[..., [1, 3, 4]].max() == 0
    assert torch.allclose(q[..., KEPT].sum(-1), torch.ones(1, 3))


def test_greedy_speculative_decoding_is_the_targets_greedy(subvocab_pair):
    prompt = [1, 3, 4, 2]
    out = specrl.SpeculativeDecoder(subvocab_pair, specrl.StaticController(3)).generate(
        prompt, max_new_tokens=20, stop_at_eos=False
    )
    assert out.token_ids == reference_greedy(subvocab_pair.target, prompt, 20, vocab_size=6)
    assert out.stats.accepted > 0


@pytest.mark.slow
def test_sampled_tokens_keep_the_targets_law(subvocab_pair):
    sampling = SamplingConfig(1.0)
    prompt = [1, 3, 4]
    counts = two_token_counts(subvocab_pair, prompt, k=2, tau=0.0, sampling=sampling, n=1200)
    assert chi_square_p_value(counts, exact_two_token_law(subvocab_pair, prompt, sampling)) > 1e-3
