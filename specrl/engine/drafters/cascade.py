"""Staged speculative decoding (Spector and Re 2023): a small draft drafts for a middle model,
whose output is what the target verifies.

Inside the cascade the small draft proposes ``inner_k`` tokens at a time and the middle model
verifies them with the same lossless rule the target uses (:func:`specrl.engine.rejection.judge`),
so the tokens it emits are distributed exactly as sampling from the middle model token by token.
That makes the middle model's distribution at each emitted position the proposal law q the
target needs; it comes out of the middle model's verify forwards, at no extra cost.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specrl.engine.cache import KVCache, new_cache
from specrl.engine.drafters.base import Proposal, stacked_proposal
from specrl.engine.drafters.model import ModelDrafter
from specrl.engine.rejection import judge
from specrl.engine.sampling import SamplingConfig
from specrl.engine.signals import DraftSignals
from specrl.engine.types import Action
from specrl.models import CacheSettings


class CascadeDrafter:
    """Proposes up to k tokens of the middle model, drafted for it by the small one.

    The action's tau and stop rule apply to the middle model's confidence and entropy at each
    emitted position, before that token is proposed. The small draft's inner steps run without a
    cut (``inner_k`` tokens each, fewer near k, so a step never emits past k).
    """

    def __init__(
        self,
        small: PreTrainedModel,
        mid: PreTrainedModel,
        vocab_size: int,
        inner_k: int = 3,
        name: str = "cascade",
        cache: CacheSettings | None = None,
        max_length: int = 0,
    ) -> None:
        if inner_k < 1:
            raise ValueError(f"the cascade's inner_k must be >= 1, got {inner_k}")
        self.name = name
        self.vocab_size = vocab_size
        self.inner_k = inner_k
        self.inner_action = Action(inner_k)  # no cut inside: tau applies to the mid's output
        self.small = ModelDrafter(f"{name}/small", small, vocab_size, cache, max_length)
        self.mid = new_cache(mid, vocab_size, cache, max_length)

    def prefill(self, tokens: torch.Tensor) -> None:
        self.small.prefill(tokens)
        self.mid.feed(tokens[:, :-1])

    def propose(
        self,
        tokens: torch.Tensor,
        k: int,
        action: Action,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> Proposal:
        sequence = tokens
        proposed: list[torch.Tensor] = []  # (B,) each
        laws: list[torch.Tensor] = []  # (B, V) each: the middle model's q at that position
        signals = DraftSignals(action, tokens.shape[0])
        stopped = False
        while len(proposed) < k and not stopped:
            # An inner step emits up to inner k + 1 tokens: keep within k.
            inner = self.small.propose(
                sequence, min(self.inner_k, k - len(proposed) - 1), self.inner_action, sampling, generator
            )
            length = sequence.shape[1]
            logits = self.mid.feed(torch.cat([sequence[:, self.mid.length :], inner.tokens], 1), inner.m + 1)
            p_mid = sampling.probs(logits)  # (B, m + 1, V)
            judgement = judge(inner.tokens, inner.q, p_mid, sampling, generator)
            a = int(judgement.accepted)  # the inner step branches on it: one read
            self.mid.rollback(length + a)
            self.small.rollback(length + a)
            emitted = torch.cat([inner.tokens[:, :a], judgement.next_token[:, None]], 1)  # (B, a + 1)
            for j in range(a + 1):
                law = p_mid[:, j]
                if signals.halts(len(proposed), law)[0]:
                    stopped = True
                    break
                proposed.append(emitted[:, j])
                laws.append(law)
            sequence = torch.cat([sequence, emitted], 1)
        confidences, entropies = signals.read()
        return stacked_proposal(
            tokens,
            self.vocab_size,
            proposed,
            laws,
            confidences[0],
            entropies[0],
            stopped,
        )

    def rollback(self, length: int) -> None:
        self.small.rollback(length)
        self.mid.rollback(length)

    def caches(self) -> list[KVCache]:
        return [*self.small.caches(), self.mid]
