"""A model with a KV cache allocated once, rolled back by moving its length (gpt-fast's cache).

transformers' ``StaticCache`` holds ``max_length`` slots per layer from the start and writes each
feed in place at the current length; ``crop`` only moves that length back, and the next feed
overwrites the rejected slots. Nothing is concatenated or copied, so every decode forward has
the same shapes: what ``torch.compile`` (and CUDA graphs under it) need. The length is kept on
the host as well, and positions and the attention mask are built from it on the device
(:mod:`specrl.engine.masks`), so neither feeding nor rolling back reads the device.

With ``compiled``, forwards of up to ``COMPILED_TOKENS`` tokens (the draft's one-token steps and
the target's verifications) run through ``torch.compile``, one graph per token count; longer
ones (prefills) run eagerly.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel, StaticCache
from transformers.cache_utils import StaticLayer

from specrl.engine.masks import prepared_mask, takes_prepared

COMPILED_TOKENS = 16  # a verification is k + 1 tokens; longer feeds are prefills


class StaticCachedModel:
    """One causal LM with a ``StaticCache`` over a prefix of the sequence (the interface of
    :class:`specrl.engine.cache.CachedModel`)."""

    def __init__(
        self, model: PreTrainedModel, vocab_size: int, max_length: int, compiled: bool = False
    ) -> None:
        self.model = model
        self.vocab_size = vocab_size
        self.max_length = max_length
        self.cache = StaticCache(config=model.config, max_cache_len=max_length)
        sliding = [type(layer).__name__ for layer in self.cache.layers if type(layer) is not StaticLayer]
        if sliding:
            raise ValueError(
                f"the {model.config.model_type} model has {sliding[0]} layers, which a static cache cannot "
                "roll back (their ring buffer overwrites the slots a rejection would go back to); load the "
                "pair with kv_cache='dynamic'"
            )
        self.window = None  # the engine's sliding-window handling is the dynamic cache's
        self._length = 0
        self.forward = model.forward
        self.compiled = torch.compile(model.forward, dynamic=False) if compiled else None

    @property
    def length(self) -> int:
        return self._length

    @torch.inference_mode()
    def feed(self, tokens: torch.Tensor, keep: int = 1) -> torch.Tensor:
        """Append ``tokens`` (B, n) to the cache; return logits of the last ``keep`` (B, keep, V)."""
        n = tokens.shape[1]
        if self._length + n > self.max_length:
            raise RuntimeError(
                f"the static KV cache holds {self.max_length} tokens and is full ({self._length} cached, "
                f"{n} more fed); it is sized to the pair's context window, which generations never pass"
            )
        forward = self.compiled if self.compiled is not None and n <= COMPILED_TOKENS else self.forward
        device, rows = tokens.device, tokens.shape[0]
        positions = torch.arange(self._length, self._length + n, device=device)  # no host read
        attention = None  # kernels that build their own mask
        if takes_prepared(self.model):
            visible = torch.arange(self.max_length, device=device) <= positions[:, None]  # (n, max_length)
            attention = prepared_mask(self.model, visible.expand(rows, 1, n, -1))
        out = forward(
            input_ids=tokens,
            attention_mask=attention,
            position_ids=positions[None].expand(rows, -1),
            cache=self.cache,
            use_cache=True,
            logits_to_keep=keep,
        )
        self._length += n
        return out.logits[..., : self.vocab_size]

    def rollback(self, length: int) -> None:
        """Cut the cache to its first ``length`` tokens (no-op if it is not longer): the length
        moves back on the device; the slots are overwritten by the next feed."""
        excess = self._length - length
        if excess > 0:
            self.cache.crop(-excess)
            self._length = length
