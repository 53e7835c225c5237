"""A draft that proposes only part of the vocabulary: a Llama whose output head has a row for each
kept token alone (its cost scales with the kept tokens, not the whole vocabulary), and whose logits
are given over the whole vocabulary with the other tokens at the lowest value (probability 0).

This is lossless: the draft simply never proposes the other tokens, and the target verifies with
its own full distribution (rejection sampling keeps the target's law for any q). Registered with
transformers' Auto classes when imported, so ``from_pretrained`` loads it by its ``model_type``.
"""

from __future__ import annotations

import inspect

import torch
from torch import nn
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.modeling_outputs import CausalLMOutputWithPast

MODEL_TYPE = "specrl_subvocab_llama"


class SubVocabLlamaConfig(LlamaConfig):
    """A :class:`LlamaConfig` with ``kept_tokens``: the token ids the output head has rows for,
    in its row order (``vocab_size`` stays the whole vocabulary: the input embeddings, the logits)."""

    model_type = MODEL_TYPE

    def __init__(self, kept_tokens: list[int] | None = None, **kwargs) -> None:
        self.kept_tokens = [int(token) for token in (kept_tokens or [])]
        kwargs["tie_word_embeddings"] = False  # the head has fewer rows than the embeddings
        super().__init__(**kwargs)


class SubVocabLlamaForCausalLM(LlamaForCausalLM):
    config_class = SubVocabLlamaConfig
    _tied_weights_keys = {}

    def __init__(self, config: SubVocabLlamaConfig) -> None:
        super().__init__(config)
        if not config.kept_tokens:
            raise ValueError("a SubVocabLlamaConfig needs kept_tokens (the token ids the head proposes)")
        self.lm_head = nn.Linear(config.hidden_size, len(config.kept_tokens), bias=False)
        self._kept: dict[torch.device, torch.Tensor] = {}  # the kept ids per device (not a weight)
        self.post_init()

    def kept_ids(self, device: torch.device) -> torch.Tensor:
        """(V_kept,) the kept token ids on ``device``, in the head's row order."""
        if device not in self._kept:
            with torch.inference_mode(False):  # a plain tensor: training may use it after inference did
                self._kept[device] = torch.tensor(self.config.kept_tokens, dtype=torch.long, device=device)
        return self._kept[device]

    def kept_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """(B, T, H) hidden states -> (B, T, V_kept) logits of the kept tokens, in the head's order."""
        return self.lm_head(hidden)

    def forward(
        self, input_ids=None, logits_to_keep: int = 0, labels=None, **kwargs
    ) -> CausalLMOutputWithPast:
        """Llama's forward; the logits are (B, T, V) over the whole vocabulary, the tokens not kept
        at the dtype's lowest value (``labels`` are not supported: train with :meth:`kept_logits`)."""
        if labels is not None:
            raise ValueError("SubVocabLlamaForCausalLM computes no loss; train on kept_logits()")
        outputs = self.model(input_ids=input_ids, **kwargs)
        hidden = outputs.last_hidden_state
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        kept = self.kept_logits(hidden)  # (B, T, V_kept)
        logits = kept.new_full((*kept.shape[:-1], self.config.vocab_size), torch.finfo(kept.dtype).min)
        logits.index_copy_(-1, self.kept_ids(kept.device), kept)  # (B, T, V)
        rest = {name: value for name, value in outputs.items() if name != "last_hidden_state"}
        return CausalLMOutputWithPast(logits=logits, **rest)

    # Llama's own parameters (its cache keyword differs between transformers versions), for the
    # callers that read them (specrl.engine.cache.cache_keyword)
    forward.__signature__ = inspect.signature(LlamaForCausalLM.forward)


AutoConfig.register(MODEL_TYPE, SubVocabLlamaConfig, exist_ok=True)
AutoModelForCausalLM.register(SubVocabLlamaConfig, SubVocabLlamaForCausalLM, exist_ok=True)
