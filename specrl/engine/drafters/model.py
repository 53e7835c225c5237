"""A causal LM as drafter: the distilled draft, the mid draft, or a quantised copy."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specrl.engine.cache import KVCache, new_cache
from specrl.engine.drafters.base import Proposal, stacked_proposal
from specrl.engine.sampling import SamplingConfig
from specrl.engine.signals import DraftSignals
from specrl.engine.types import Action
from specrl.models import CacheSettings


class ModelDrafter:
    """Runs the model one token at a time on its own KV cache; q is its processed softmax.

    Drafting stops before a token whose confidence max q is below tau or that the action's stop
    rule rejects: that position's forward is paid, its token is not proposed.
    """

    def __init__(
        self,
        name: str,
        model: PreTrainedModel,
        vocab_size: int,
        cache: CacheSettings | None = None,
        max_length: int = 0,
    ) -> None:
        self.name = name
        self.cache = new_cache(model, vocab_size, cache, max_length)

    def prefill(self, tokens: torch.Tensor) -> None:
        """Feed the prompt but its last token (the generation's prefill)."""
        self.cache.feed(tokens[:, :-1])

    def propose(
        self,
        tokens: torch.Tensor,
        k: int,
        action: Action,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> Proposal:
        drafted, q_of_drafted = [], []
        signals = DraftSignals(action, tokens.shape[0])  # read per position if the cut needs them
        stopped = False
        pending = tokens[:, self.cache.length :]  # tokens the draft has not seen yet, >= 1
        for i in range(k):
            q = sampling.probs(self.cache.feed(pending)[:, -1])  # (B, V)
            if signals.halts(i, q)[0]:
                stopped = True
                break
            x = sampling.choose(q, generator)  # (B,), on the device
            drafted.append(x)
            q_of_drafted.append(q)
            pending = x[:, None]
        confidences, entropies = signals.read()
        return stacked_proposal(
            tokens,
            self.cache.vocab_size,
            drafted,
            q_of_drafted,
            confidences[0],
            entropies[0],
            stopped,
        )

    def rollback(self, length: int) -> None:
        self.cache.rollback(length)

    def caches(self) -> list[KVCache]:
        return [self.cache]
