"""What every drafter gives the engine: a proposal with its law, and a cheap rollback."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import torch

from specrl.engine.cache import KVCache
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action


class DrafterError(ValueError):
    """A drafter that does not exist, cannot be built here, or does not fit the pair."""


@dataclass
class Proposal:
    """Up to k proposed tokens and the law each was drawn from.

    Attributes:
        tokens: (B, m) the proposed tokens x_1..x_m.
        q: (B, m, V) q_i, the distribution x_i was drawn from given the tokens before it
            (after the generation's sampling processing); a point mass for a deterministic
            drafter. The accept/reject rule (:mod:`specrl.engine.rejection`) needs nothing else.
        confidences: max_v q_i(v) at every position the drafter looked at, the one that stopped
            drafting included (m or m + 1 entries).
        entropies: the entropy of q_i (nats) at the same positions.
        stopped: drafting ended before k: tau or the stop rule, or nothing more to propose.
    """

    tokens: torch.Tensor
    q: torch.Tensor
    confidences: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    stopped: bool = False

    @property
    def m(self) -> int:
        return self.tokens.shape[1]


@runtime_checkable
class Drafter(Protocol):
    """Proposes tokens after a sequence and keeps whatever state it needs (a KV cache) as a
    prefix of that sequence.

    ``propose`` is given the whole sequence; a drafter that has not seen its tail yet catches up
    first (that time is drafting time). The token at each position must be drawn from the q it
    reports, and the decision to stop before a position may depend only on what came before it:
    ``action.halts(position, confidence, entropy)`` with that position's signals. That is all
    losslessness asks of a drafter.
    """

    name: str

    def propose(
        self,
        tokens: torch.Tensor,
        k: int,
        action: Action,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> Proposal: ...

    def rollback(self, length: int) -> None:
        """Forget everything after the first ``length`` tokens of the sequence (no recompute)."""

    def caches(self) -> list[KVCache]:
        """The KV caches it keeps (none for a lookup drafter), for inspection and tests."""


def stacked_proposal(
    tokens: torch.Tensor,
    vocab_size: int,
    drafted: list[torch.Tensor],
    laws: list[torch.Tensor],
    confidences: list[float],
    entropies: list[float],
    stopped: bool,
) -> Proposal:
    """The proposal of the tokens ``drafted`` one position at a time ((B,) each), drawn from
    ``laws`` ((B, V) each); none drafted (k = 0, or stopped at once) gives m = 0."""
    if not drafted:
        batch = tokens.shape[0]
        empty_q = torch.empty((batch, 0, vocab_size), device=tokens.device)
        return Proposal(tokens.new_empty((batch, 0)), empty_q, confidences, entropies, stopped)
    return Proposal(torch.stack(drafted, 1), torch.stack(laws, 1), confidences, entropies, stopped)
