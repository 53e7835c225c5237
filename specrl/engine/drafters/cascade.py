"""Staged speculative decoding (Spector and Re 2023): a small draft drafts for a middle model,
whose output is what the target verifies.

The small draft proposes ``inner_k`` tokens at a time and the middle model verifies them with the
lossless rule (:func:`specrl.engine.rejection.judge`), so what it emits is distributed as the
middle model's samples: its distributions from the verify forwards are the q the target needs.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

from specrl.engine.cache import KVCache, on_device
from specrl.engine.drafters.base import Proposal
from specrl.engine.drafters.model import ModelDrafter
from specrl.engine.rejection import judge, read_outcomes
from specrl.engine.sampling import SamplingConfig
from specrl.engine.signals import DraftSignals
from specrl.engine.types import Action
from specrl.models import CacheSettings


class CascadeDrafter:
    """Proposes up to k tokens of the middle model per row, drafted for it by the small one.

    The action's tau and stop rule apply to the middle model's confidence and entropy at each
    emitted position, before that token is proposed. The small draft's inner steps run without a
    cut (``inner_k`` tokens each, fewer near k, so a step never emits past k). Each inner round
    takes every row that is still proposing; one host read per round tells each row's outcome.
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
        rows: int = 0,
    ) -> None:
        if inner_k < 1:
            raise ValueError(f"the cascade's inner_k must be >= 1, got {inner_k}")
        self.name = name
        self.vocab_size = vocab_size
        self.inner_k = inner_k
        self.inner_action = Action(inner_k)  # no cut inside: tau applies to the mid's output
        self.small = ModelDrafter(f"{name}/small", small, vocab_size, cache, max_length, rows)
        self.mid = KVCache(mid, vocab_size, cache, max_length, rows)

    def admit(self, prompts: list[list[int]]) -> None:
        self.small.admit(prompts)
        self.mid.admit([prompt[:-1] for prompt in prompts])

    def propose(
        self,
        sequences: list[list[int]],
        ks: list[int],
        action: Action,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> Proposal:
        rows = len(sequences)
        sequences = [list(sequence) for sequence in sequences]  # each grows by what the mid emits
        signals = DraftSignals(action, rows)
        tokens: list[list[int]] = [[] for _ in range(rows)]  # each row's proposals
        where: list[list[int]] = [[] for _ in range(rows)]  # the column of each one's law in ``laws``
        laws: list[torch.Tensor] = []  # (B, a + 1, V) per inner round: the mid's q at what it emitted
        stopped = [False] * rows
        while True:
            active = [not stopped[r] and len(tokens[r]) < ks[r] for r in range(rows)]
            if not any(active):
                break
            # An inner step emits up to inner k + 1 tokens: keep within k.
            inner_ks = [
                min(self.inner_k, ks[r] - len(tokens[r]) - 1) if active[r] else 0 for r in range(rows)
            ]
            inner = self.small.propose(sequences, inner_ks, self.inner_action, sampling, generator)
            lengths = [len(sequence) for sequence in sequences]
            pending = [
                sequence[held:] if active[r] else []
                for r, (sequence, held) in enumerate(zip(sequences, self.mid.lengths, strict=True))
            ]
            p_mid = sampling.probs(self.mid.verify(pending, inner.tokens, inner.proposed))  # (B, w + 1, V)
            judgement = judge(inner.tokens, inner.proposed, inner.q, p_mid, sampling, generator)
            outcomes = read_outcomes(judgement, inner.tokens, inner.proposed)  # the round's one read
            accepted = [a for a, *_ in outcomes]
            emitted = [drafted[:a] + [next_token] for a, next_token, drafted, _ in outcomes]  # per row
            kept = [length + a for length, a in zip(lengths, accepted, strict=True)]
            self.mid.rollback(kept)
            self.small.rollback(kept)
            base = sum(law.shape[1] for law in laws)
            laws.append(p_mid)
            for j in range(max(a + 1 for a, active_row in zip(accepted, active, strict=True) if active_row)):
                looking = [active[r] and not stopped[r] and j <= accepted[r] for r in range(rows)]
                if not any(looking):
                    break
                halts = signals.halts([len(proposals) for proposals in tokens], p_mid[:, j], looking)
                for r in range(rows):
                    if not looking[r]:
                        continue
                    if halts[r]:
                        stopped[r] = True
                        continue
                    tokens[r].append(emitted[r][j])
                    where[r].append(base + j)
            for r in range(rows):
                if active[r]:
                    sequences[r] += emitted[r]
        return self._proposal(tokens, where, laws, signals, stopped)

    def _proposal(self, tokens, where, laws, signals: DraftSignals, stopped: list[bool]) -> Proposal:
        rows, device = len(tokens), self.mid.model.device
        proposed = [len(row) for row in tokens]
        width = max(proposed, default=0)
        table = on_device([row + [0] * (width - len(row)) for row in tokens], device).view(rows, width)
        if not width:
            q = torch.empty((rows, 0, self.vocab_size), device=device)
        else:
            every = torch.cat(laws, 1)  # (B, columns, V)
            index = on_device([row + [0] * (width - len(row)) for row in where], device)
            q = every.gather(1, index[..., None].expand(-1, -1, every.shape[-1]))  # (B, w, V)
        return Proposal(table, q, proposed, *signals.read(), stopped)

    def rollback(self, lengths: list[int]) -> None:
        self.small.rollback(lengths)
        self.mid.rollback(lengths)

    def select(self, rows: list[int]) -> None:
        self.small.select(rows)
        self.mid.select(rows)

    def caches(self) -> list[KVCache]:
        return [*self.small.caches(), self.mid]
