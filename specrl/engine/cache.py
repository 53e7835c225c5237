"""A model plus its KV cache, fed incrementally and cut back on rejection."""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel


class CachedModel:
    """One causal LM with a KV cache over a prefix of the sequence.

    The cache holds the first ``length`` tokens of the sequence. ``feed`` runs only the
    tokens after that, and ``rollback`` cuts the cache to a shorter prefix by dropping its
    tail: the prefix is never recomputed.
    """

    def __init__(self, model: PreTrainedModel, vocab_size: int) -> None:
        self.model = model
        self.vocab_size = vocab_size  # logits beyond the shared tokenizer are padding rows
        self.cache = DynamicCache(config=model.config)

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def feed(self, tokens: torch.Tensor, keep: int = 1) -> torch.Tensor:
        """Append ``tokens`` (B, n) to the cache; return logits of the last ``keep`` (B, keep, V)."""
        out = self.model(input_ids=tokens, cache=self.cache, use_cache=True, logits_to_keep=keep)
        return out.logits[..., : self.vocab_size]

    def rollback(self, length: int) -> None:
        """Cut the cache to its first ``length`` tokens (no-op if it is not longer)."""
        excess = self.length - length
        if excess > 0:
            self.cache.crop(-excess)
