"""A model plus its KV cache, fed incrementally and cut back on rejection."""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from specrl.engine.static_cache import StaticCachedModel
from specrl.models import CacheSettings, check_cache


class CachedModel:
    """One causal LM with a KV cache over a prefix of the sequence.

    The cache holds the first ``length`` tokens of the sequence. ``feed`` runs only the
    tokens after that, and ``rollback`` cuts the cache to a shorter prefix by dropping its
    tail: the prefix is never recomputed.

    Sliding-window layers (Mistral, Gemma 2/3, Qwen2 with ``use_sliding_window``) keep only
    the last ``window - 1`` tokens. Their cache records past states until the next
    ``rollback``, which cuts the rejected tail and trims the layer back to its window; so a
    rollback may go back to any length since the previous one, not before it (the engine
    never goes further: the accepted prefix only grows).
    """

    def __init__(self, model: PreTrainedModel, vocab_size: int) -> None:
        self.model = model
        self.vocab_size = vocab_size  # logits beyond the shared tokenizer are padding rows
        self.cache = DynamicCache(config=model.config)
        check_cache(self.cache, model.config)  # refuse, by name, a cache that cannot be cut back
        self.window = min(
            (layer.sliding_window for layer in self.cache.layers if getattr(layer, "is_sliding", False)),
            default=None,
        )
        if self.window is not None:
            self.cache.activate_past_recording()
        self.floor = 0  # sliding layers: no rollback below the length at the last trim
        self.checked = False

    @property
    def length(self) -> int:
        return self.cache.get_seq_length()

    @torch.inference_mode()
    def feed(self, tokens: torch.Tensor, keep: int = 1) -> torch.Tensor:
        """Append ``tokens`` (B, n) to the cache; return logits of the last ``keep`` (B, keep, V)."""
        before = None if self.checked else self.length  # the first feed checks the cache grew
        out = self.model(input_ids=tokens, cache=self.cache, use_cache=True, logits_to_keep=keep)
        if before is not None:
            self.checked = True
            if self.length != before + tokens.shape[1]:
                raise RuntimeError(
                    f"the {self.model.config.model_type} model ({type(self.model).__name__}) did not "
                    f"extend the KV cache it was given (length {before} -> {self.length} after "
                    f"{tokens.shape[1]} tokens): its forward does not take transformers' `cache` "
                    "argument, so specrl cannot decode with it incrementally"
                )
        return out.logits[..., : self.vocab_size]

    def rollback(self, length: int) -> None:
        """Cut the cache to its first ``length`` tokens (no-op if it is not longer)."""
        excess = self.length - length
        if self.window is None:
            if excess > 0:
                self.cache.crop(-excess)
            return
        # Sliding layers: crop even when nothing is rejected, to trim them to the window.
        if length < self.floor:
            raise RuntimeError(
                f"cannot roll the {self.model.config.model_type} cache back to {length} tokens: its "
                f"sliding-window layers were trimmed at {self.floor}"
            )
        trims = self.length >= self.window
        self.cache.crop(-max(excess, 0))
        if trims:
            self.floor = self.length


KVCache = CachedModel | StaticCachedModel  # what a generation's caches are; one interface


def new_cache(
    model: PreTrainedModel, vocab_size: int, settings: CacheSettings | None, max_length: int
) -> KVCache:
    """The cache a generation keeps for ``model``, as the pair's :class:`CacheSettings` ask
    (dynamic when none are given); a static one holds ``max_length`` tokens."""
    if settings is None or settings.kind == "dynamic":
        return CachedModel(model, vocab_size)
    return StaticCachedModel(model, vocab_size, max_length, compiled=settings.compile)
