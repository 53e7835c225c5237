"""A causal LM as drafter: the distilled draft, the mid draft, or a quantised copy."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import PreTrainedModel

from specrl.engine.cache import KVCache, on_device, padded
from specrl.engine.drafters.base import Proposal
from specrl.engine.sampling import SamplingConfig
from specrl.engine.signals import DraftSignals
from specrl.engine.types import Action
from specrl.models import CacheSettings


class ModelDrafter:
    """Runs the model one token at a time for every row on its own KV cache; q is its processed
    softmax. Rows draft in lockstep (a catch-up forward over what each row's cache has not seen,
    then one forward per position); a row stops at its k or where the action halts (that forward
    is paid, its token not proposed) and is fed holes until every row has. The action is one for
    every row or one per row (vLLM's requests)."""

    def __init__(
        self,
        name: str,
        model: PreTrainedModel,
        vocab_size: int,
        cache: CacheSettings | None = None,
        max_length: int = 0,
        rows: int = 0,
    ) -> None:
        self.name = name
        # the rows start empty: each catches up on its sequence when first asked to propose
        self.cache = KVCache(model, vocab_size, cache, max_length, rows)

    def admit(self, prompts: list[list[int]]) -> None:
        """New rows: their prompts but the last token are prefilled (the generation's prefill)."""
        self.cache.admit([prompt[:-1] for prompt in prompts])

    def propose(
        self,
        sequences: list[list[int]],
        ks: list[int],
        action: Action | Sequence[Action],
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> Proposal:
        rows, cache = len(sequences), self.cache
        signals = DraftSignals(action, rows)  # read per position if the cut needs them
        proposed, stopped = [0] * rows, [False] * rows
        drafting = [k > 0 for k in ks]
        columns, laws = [], []  # (B,) tokens and (B, V) laws, one per position
        seen = cache.lengths
        pending = [sequence[length:] for sequence, length in zip(sequences, seen, strict=True)]  # >= 1 each
        ids, counts = padded(pending, cache.model.device)
        for position in range(max(ks, default=0)):
            logits = cache.feed(ids, counts, keep=1 if counts is None else ids.shape[1])  # (B, keep, V)
            if counts is None:
                last = logits[:, -1]
            else:  # each row's last real column
                last = logits[torch.arange(rows), on_device([max(c, 1) - 1 for c in counts], logits.device)]
            q = sampling.probs(last)  # (B, V)
            halts = signals.halts(position, q, drafting)
            for r in range(rows):
                if drafting[r] and halts[r]:
                    drafting[r], stopped[r] = False, True
            if not any(drafting):
                break
            columns.append(sampling.choose(q, generator))  # (B,), on the device
            laws.append(q)
            for r in range(rows):
                if drafting[r]:
                    proposed[r] += 1
                    drafting[r] = proposed[r] < ks[r]  # the last proposal is not fed: only its law is needed
            if not any(drafting):
                break
            ids, counts = columns[-1][:, None], None if all(drafting) else [int(d) for d in drafting]
        width, device = max(proposed, default=0), cache.model.device
        if not width:
            tokens = torch.empty((rows, 0), dtype=torch.long, device=device)
            q = torch.empty((rows, 0, cache.vocab_size), device=device)
        else:
            tokens, q = torch.stack(columns[:width], 1), torch.stack(laws[:width], 1)  # (B, w), (B, w, V)
        return Proposal(tokens, q, proposed, *signals.read(), stopped)

    def rollback(self, lengths: list[int]) -> None:
        self.cache.rollback(lengths)

    def select(self, rows: list[int]) -> None:
        self.cache.select(rows)

    def caches(self) -> list[KVCache]:
        return [self.cache]
