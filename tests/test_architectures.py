"""The engine on the architectures users bring: greedy equality and exact cache rollback.

Each family is a tiny random model built from its config (no download), paired with a
draft of the same family (the target with noise on its output head: partial acceptance),
saved with the word-level test tokenizer and loaded through ``specrl.load_pair``. The
sliding-window families use a window of 16 tokens so every generation here crosses it.
Architectures whose cache cannot be cut back (recurrent / linear-attention state) are
refused by name.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers as hf
from conftest import prompts, reference_greedy, step_and_check_rollback, word_tokenizer

import specrl
from specrl.engine.cache import KVCache
from specrl.models import UnsupportedArchitectureError

VOCAB = 48  # tokenizer words; the models carry 8 padding rows (some tokenizers add a token)
ROWS = VOCAB + 8
WINDOW = 16
COMMON = dict(
    vocab_size=ROWS, initializer_range=0.2, eos_token_id=VOCAB - 1, bos_token_id=0, pad_token_id=VOCAB - 1
)
ATTENTION = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
    tie_word_embeddings=False,
)
MHA = {k: v for k, v in ATTENTION.items() if k != "num_key_value_heads"}
HYBRID = ["sliding_attention", "full_attention"]
# Wide initialisation keeps tiny random models from collapsing to one repeated token;
# Gemma 2/3 (embeddings scaled by sqrt(hidden), soft-capped logits) need a narrower one.
GEMMA = {**COMMON, "initializer_range": 0.1}

FAMILIES = {
    "llama": lambda: hf.LlamaConfig(**COMMON, **ATTENTION),
    "qwen2": lambda: hf.Qwen2Config(**COMMON, **ATTENTION),
    "qwen2-sliding": lambda: hf.Qwen2Config(
        **COMMON, **ATTENTION, use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1
    ),
    "qwen3": lambda: hf.Qwen3Config(**COMMON, **ATTENTION, head_dim=8),
    "mistral-sliding": lambda: hf.MistralConfig(**COMMON, **ATTENTION, sliding_window=WINDOW),
    "gemma": lambda: hf.GemmaConfig(**COMMON, **ATTENTION, head_dim=8),
    "gemma2": lambda: hf.Gemma2Config(
        **GEMMA, **ATTENTION, head_dim=8, sliding_window=WINDOW, layer_types=HYBRID
    ),
    "gemma3": lambda: hf.Gemma3TextConfig(
        **GEMMA, **ATTENTION, head_dim=8, sliding_window=WINDOW, layer_types=HYBRID
    ),
    "phi3": lambda: hf.Phi3Config(**COMMON, **ATTENTION),
    "gpt2": lambda: hf.GPT2Config(
        **COMMON, n_embd=32, n_layer=2, n_head=4, n_positions=256, tie_word_embeddings=False
    ),
    "gpt_neox": lambda: hf.GPTNeoXConfig(**COMMON, **MHA),
    "olmo": lambda: hf.OlmoConfig(**COMMON, **ATTENTION),
    "olmo2": lambda: hf.Olmo2Config(**COMMON, **ATTENTION),
}
SLIDING = {"qwen2-sliding", "mistral-sliding", "gemma2", "gemma3"}


def build(config, seed: int, noise: float = 0.0, sharpness: float = 6.0):
    """A random model from ``config``; with ``noise``, its output head perturbed (the draft)."""
    torch.manual_seed(seed)
    model = hf.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        head = model.get_output_embeddings().weight
        head.mul_(sharpness / head.std())
        if noise:
            torch.manual_seed(seed + 100)
            head.add_(torch.randn_like(head) * head.std() * noise)
    return model


def save_pair(path: Path, config_fn, noise: float = 0.5) -> specrl.ModelPair:
    tokenizer = word_tokenizer(VOCAB)
    for role, model in (("target", build(config_fn(), 0)), ("draft", build(config_fn(), 0, noise=noise))):
        model.save_pretrained(path / role)
        tokenizer.save_pretrained(path / role)
    return specrl.load_pair(target=str(path / "target"), draft=str(path / "draft"), device="cpu")


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family_pair(request, tmp_path_factory) -> tuple[str, specrl.ModelPair]:
    return request.param, save_pair(tmp_path_factory.mktemp(request.param), FAMILIES[request.param])


def test_families_load_with_their_own_model_type(family_pair):
    name, pair = family_pair
    expected = {"qwen2-sliding": "qwen2", "mistral-sliding": "mistral", "gemma3": "gemma3_text"}.get(
        name, name
    )
    assert pair.target.config.model_type == pair.draft.config.model_type == expected
    cached = KVCache(pair.target, pair.vocab_size)
    assert (cached.window == WINDOW) == (name in SLIDING)


def test_greedy_speculative_output_equals_plain_greedy(family_pair):
    name, pair = family_pair
    n = 40  # prompt 12 + 40 tokens: past the 16-token window of the sliding families
    proposed = accepted = 0
    for prompt in prompts(2, VOCAB, seed=11):
        with torch.inference_mode():
            expected = reference_greedy(pair.target, prompt, n, vocab_size=pair.vocab_size)
        for k, tau in ((1, 0.0), (3, 0.0), (6, 0.3)):
            decoder = specrl.SpeculativeDecoder(pair, specrl.StaticController(k, tau))
            out = decoder.generate(prompt, max_new_tokens=n, stop_at_eos=False)
            assert out.token_ids == expected, f"{name}: k={k} tau={tau}"
            proposed, accepted = proposed + out.stats.proposed, accepted + out.stats.accepted
    assert 0 < accepted < proposed, f"{name}: acceptance {accepted}/{proposed}: rollbacks not exercised"


def test_cached_logits_equal_full_recompute_after_accepts_and_rejections(family_pair):
    name, pair = family_pair
    generation, outcomes = step_and_check_rollback(pair, prompts(1, VOCAB, seed=5)[0], 56, name)
    assert len(generation.tokens[0]) > 2 * WINDOW
    assert {(True, True), (False, True), (True, False)} <= outcomes, f"{name}: {outcomes}"
    if name in SLIDING:  # the sliding layers stay trimmed to their window between steps
        for cached in generation.caches():
            sizes = [layer.keys.shape[-2] for layer in cached.cache.layers if layer.is_sliding]
            assert sizes and max(sizes) <= WINDOW - 1


# ---- refused architectures ---------------------------------------------------------------

RECURRENT = {
    "mamba": lambda: hf.MambaConfig(**COMMON, hidden_size=32, state_size=4, num_hidden_layers=2, expand=2),
    "qwen3_next": lambda: hf.Qwen3NextConfig(
        **COMMON,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        linear_num_value_heads=2,
        linear_num_key_heads=2,
        linear_key_head_dim=8,
        linear_value_head_dim=8,
        moe_intermediate_size=16,
        shared_expert_intermediate_size=16,
        num_experts=2,
        num_experts_per_tok=1,
        layer_types=["linear_attention", "full_attention"],
    ),
}


@pytest.mark.parametrize("model_type", sorted(RECURRENT))
def test_recurrent_architectures_are_refused_by_name_at_load(tmp_path, model_type):
    with pytest.raises(UnsupportedArchitectureError, match=f"'{model_type}'.*cannot be rolled back"):
        save_pair(tmp_path, RECURRENT[model_type])


def test_a_cache_layer_that_cannot_be_cut_back_is_refused_at_first_use(monkeypatch):
    from transformers.cache_utils import LinearAttentionLayer

    model = build(FAMILIES["olmo2"](), 0)
    original = hf.DynamicCache.__init__

    def with_recurrent_layer(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.layers[0] = LinearAttentionLayer()

    monkeypatch.setattr(hf.DynamicCache, "__init__", with_recurrent_layer)
    with pytest.raises(UnsupportedArchitectureError, match="'olmo2'.*LinearAttentionLayer"):
        KVCache(model, VOCAB)


def test_a_model_that_ignores_the_cache_is_refused_at_first_feed():
    model = build(FAMILIES["llama"](), 0)
    forward = model.forward
    model.forward = lambda *args, cache=None, **kwargs: forward(*args, **kwargs)  # drops the cache
    with pytest.raises(RuntimeError, match="llama.*did not extend the KV cache"):
        KVCache(model, VOCAB).feed(torch.tensor([prompts(1, VOCAB)[0]]))


def test_sliding_rollback_below_the_last_trim_is_refused(tmp_path):
    pair = save_pair(tmp_path, FAMILIES["mistral-sliding"])
    cached = KVCache(pair.target, pair.vocab_size)
    cached.feed(torch.tensor([prompts(1, VOCAB, length=2 * WINDOW)[0]]))
    cached.rollback([2 * WINDOW - 3])  # fine: the layer recorded its past since the last trim
    with pytest.raises(RuntimeError, match="sliding-window layers were trimmed"):
        cached.rollback([WINDOW])
