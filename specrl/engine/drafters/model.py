"""A causal LM as drafter: the distilled draft, the mid draft, or a quantised copy."""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specrl.engine.cache import CachedModel
from specrl.engine.drafters.base import Proposal, stacked_proposal
from specrl.engine.sampling import SamplingConfig, entropy
from specrl.engine.types import Action


class ModelDrafter:
    """Runs the model one token at a time on its own KV cache; q is its processed softmax.

    Drafting stops before a token whose confidence max q is below tau or that the action's stop
    rule rejects: that position's forward is paid, its token is not proposed.
    """

    def __init__(self, name: str, model: PreTrainedModel, vocab_size: int) -> None:
        self.name = name
        self.cache = CachedModel(model, vocab_size)

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
        drafted, q_of_drafted, confidences, entropies = [], [], [], []
        stopped = False
        pending = tokens[:, self.cache.length :]  # tokens the draft has not seen yet, >= 1
        for i in range(k):
            q = sampling.probs(self.cache.feed(pending)[:, -1])  # (B, V)
            c_i, h_i = q.max(-1).values.item(), entropy(q).item()  # confidence, entropy (nats)
            confidences.append(c_i)
            entropies.append(h_i)
            if action.halts(i, c_i, h_i):
                stopped = True
                break
            x = sampling.choose(q, generator)  # (B,)
            drafted.append(x)
            q_of_drafted.append(q)
            pending = x[:, None]
        return stacked_proposal(
            tokens, self.cache.vocab_size, drafted, q_of_drafted, confidences, entropies, stopped
        )

    def rollback(self, length: int) -> None:
        self.cache.rollback(length)

    def caches(self) -> list[CachedModel]:
        return [self.cache]
