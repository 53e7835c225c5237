"""The static KV cache (allocated once, rolled back by moving its length) is lossless too.

The same checks as the dynamic cache's: greedy equality with the target's own greedy decoding for
every k and tau, cached logits equal to a full recompute after every accept and rejection (every
drafter of the pool), and the target's law of the first two sampled tokens. ``torch.compile``
over it is checked where it can run here (the CPU's inductor backend).
"""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import torch
from conftest import (
    chi_square_p_value,
    exact_two_token_law,
    prompts,
    random_llama,
    reference_greedy,
    step_and_check_rollback,
    two_token_counts,
)
from transformers import MistralConfig, MistralForCausalLM

import specrl
from specrl.engine.cache import KVCache
from specrl.engine.sampling import SamplingConfig
from specrl.envs.scenario import PairSpec
from specrl.latency.store import latency_path
from specrl.models import CacheSettings


def static(pair: specrl.ModelPair, compile: bool = False) -> specrl.ModelPair:
    return dataclasses.replace(pair, cache=CacheSettings("static", compile))


def test_the_pair_chooses_the_cache_every_model_of_a_generation_gets(pool_pair):
    generation = specrl.SpeculativeDecoder(static(pool_pair), specrl.StaticController(3)).start([1, 2, 3])
    for drafter in ("draft", "draft-mid", "cascade"):
        generation.drafter(drafter)
    assert {cache.static for cache in generation.caches()} == {True}
    assert len(generation.caches()) == 5  # target, draft, draft-mid, the cascade's small and mid
    dynamic = specrl.SpeculativeDecoder(pool_pair, specrl.StaticController(3)).start([1, 2, 3])
    assert {cache.static for cache in dynamic.caches()} == {False}


@pytest.mark.parametrize("batch", [1, 4])
def test_greedy_equals_plain_target_greedy_for_every_k_and_tau(close_pair, batch):
    """At B = 4 the rows' prompts differ in length and the rows accept differently: the static grid
    holds holes, packed away when full, and every row still equals its own greedy decoding."""
    batch_prompts = [p[: 5 + 3 * i] for i, p in enumerate(prompts(batch, close_pair.vocab_size, seed=11))]
    expected = [reference_greedy(close_pair.target, prompt, 24) for prompt in batch_prompts]
    decoder_pair = static(close_pair)
    for k, tau in itertools.product(range(0, 9, 2), (0.0, 0.5)):
        decoder = specrl.SpeculativeDecoder(decoder_pair, specrl.StaticController(k, tau))
        outs = decoder.generate_batch(batch_prompts, max_new_tokens=24, stop_at_eos=False)
        assert [out.token_ids for out in outs] == expected, f"k={k} tau={tau}"
        if k == 4 and tau == 0.0:
            assert 0 < outs.stats.accepted < outs.stats.proposed  # rejections: equality is not trivial


def test_cached_logits_equal_full_recompute_after_accepts_and_rejections_for_every_drafter(pool_pair):
    drafters = ("draft", "draft-mid", "cascade", "ngram")
    _, outcomes = step_and_check_rollback(static(pool_pair), [1, 2, 3, 4, 1, 2], 60, "static", drafters)
    assert {(True, True), (False, True), (True, False)} <= outcomes


@pytest.mark.slow
@pytest.mark.parametrize("k,tau,batch", [(3, 0.0, 1), (3, 0.5, 1), (3, 0.0, 4)])
def test_speculative_sampling_matches_target_law(small_vocab_pair, k, tau, batch):
    prompt, sampling = [1, 2, 3, 0, 4], SamplingConfig(1.0)
    counts = two_token_counts(static(small_vocab_pair), prompt, k, tau, sampling, n=1000, batch=batch)
    law = exact_two_token_law(small_vocab_pair, prompt, sampling)
    assert chi_square_p_value(counts, law) > 1e-3


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_feeds_after_rollbacks_equal_a_recompute_with_either_attention_kernel(attention):
    """Rejected tokens are written, then the length moves back over them: the next feeds (one
    token or several) must see only the kept prefix, through the mask the cache builds."""
    model = random_llama(64, 0, context=128)
    model.set_attn_implementation(attention)
    generator = torch.Generator().manual_seed(0)
    sequence = torch.randint(0, 63, (1, 60), generator=generator)
    cache = KVCache(model, 64, CacheSettings("static"), max_length=128)
    cache.feed(sequence[:, :10])
    while cache.length < 50:
        rejected = torch.randint(0, 63, (1, int(torch.randint(1, 5, (1,), generator=generator))))
        kept = cache.length
        cache.feed(rejected)
        cache.rollback([kept])
        n = int(torch.randint(1, 4, (1,), generator=generator))
        logits = cache.feed(sequence[:, kept : kept + n], keep=n)
        with torch.inference_mode():
            full = model(sequence[:, : kept + n]).logits[:, -n:]
        torch.testing.assert_close(logits, full, atol=1e-5, rtol=1e-5)


def test_a_full_static_cache_and_bad_settings_are_refused_by_name():
    model = random_llama(16, 0, context=32)
    cache = KVCache(model, 16, CacheSettings("static"), max_length=8)  # 8 + a step's room: 25 slots
    cache.feed(torch.tensor([[1, 2, 3, 4, 5, 6] * 3]))
    with pytest.raises(RuntimeError, match="holds 25 slots and is full"):
        cache.feed(torch.tensor([[1, 2, 3] * 3]))
    cache.rollback([16])  # room again: the width moved back
    assert cache.feed(torch.tensor([[1, 2, 3] * 3])).shape == (1, 1, 16) and cache.length == 25
    with pytest.raises(ValueError, match="unknown KV cache 'paged'; choose one of dynamic, static"):
        CacheSettings("paged")
    with pytest.raises(ValueError, match="compile=True needs kv_cache='static'"):
        CacheSettings("dynamic", compile=True)


def test_sliding_window_models_are_sent_to_the_dynamic_cache():
    config = MistralConfig(
        vocab_size=16,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        sliding_window=8,
    )
    model = MistralForCausalLM(config).eval()
    with pytest.raises(ValueError, match="load the pair with kv_cache='dynamic'"):
        KVCache(model, 16, CacheSettings("static"), 64)
    assert KVCache(model, 16, CacheSettings("dynamic"), 64).window == 8


@pytest.mark.slow
def test_compiled_static_decoding_stays_lossless(close_pair):
    """torch.compile (inductor, on the CPU here) over the static cache: greedy output unchanged."""
    prompt = prompts(1, close_pair.vocab_size, seed=4)[0]
    expected = reference_greedy(close_pair.target, prompt, 16)
    decoder = specrl.SpeculativeDecoder(static(close_pair, compile=True), specrl.StaticController(3))
    out = decoder.generate(prompt, max_new_tokens=16, stop_at_eos=False)
    assert out.token_ids == expected
    again = decoder.generate(prompt, max_new_tokens=16, stop_at_eos=False)  # the graphs are reused
    assert again.token_ids == expected


def test_a_scenario_selects_the_cache_and_its_latency_is_kept_apart():
    with pytest.raises(ValueError, match="pair: unknown KV cache 'paged'"):
        PairSpec(kv_cache="paged")
    with pytest.raises(ValueError, match="pair: compile=True needs kv_cache='static'"):
        PairSpec(compile=True)
    static_info = PairSpec(preset="tiny", kv_cache="static", compile=True, device="cpu").info()
    dynamic_info = PairSpec(preset="tiny", device="cpu").info()
    assert static_info.cache == CacheSettings("static", True)
    assert latency_path(static_info).name.endswith("__static-compiled.json")
    assert latency_path(static_info).name.removesuffix("__static-compiled.json") + ".json" == (
        latency_path(dynamic_info).name
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without CUDA gives")
def test_cuda_asked_for_where_there_is_none_is_refused_by_name():
    with pytest.raises(specrl.models.PairError, match="sees no CUDA device here; .* or pass device='cpu'"):
        specrl.load_pair(preset="tiny", device="cuda")
