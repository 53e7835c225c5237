"""What every drafter gives the engine: a proposal with its law, and a cheap rollback."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import torch

from specrl.engine.cache import KVCache
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action


class DrafterError(ValueError):
    """A drafter that does not exist, cannot be built here, or does not fit the pair."""


@dataclass
class Proposal:
    """Each row's proposed tokens (up to its k) and the law each was drawn from.

    Attributes:
        tokens: (B, w) the proposed tokens x_1..x_m of each row, right-padded to w = max m.
        q: (B, w, V) q_i, the distribution x_i was drawn from given the tokens before it
            (after the generation's sampling processing); a point mass for a deterministic
            drafter. The accept/reject rule (:mod:`specrl.engine.rejection`) needs nothing else.
        proposed: m per row (row r's proposals are its first m_r columns).
        confidences: per row, max_v q_i(v) at every position the drafter looked at, the one
            that stopped drafting included (m or m + 1 entries).
        entropies: per row, the entropy of q_i (nats) at the same positions.
        stopped: per row, drafting ended before k: tau or the stop rule, or nothing more to propose.
    """

    tokens: torch.Tensor
    q: torch.Tensor
    proposed: list[int]
    confidences: list[list[float]]
    entropies: list[list[float]]
    stopped: list[bool]

    @property
    def rows(self) -> int:
        return self.tokens.shape[0]


@runtime_checkable
class Drafter(Protocol):
    """Proposes tokens after each row's sequence and keeps whatever state it needs (a KV cache
    over the rows) as a prefix of each row's sequence.

    ``propose`` is given every row's whole sequence and its k; a drafter that has not seen a
    row's tail yet catches up first (that time is drafting time). The token at each position must
    be drawn from the q it reports, and the decision to stop before a position may depend only on
    what came before it: ``action.halts(position, confidence, entropy)`` with that position's
    signals. That is all losslessness asks of a drafter. Rows join (``admit``, with their
    prompts) and leave (``select``) as the generation's rows do.
    """

    name: str

    def propose(
        self,
        sequences: list[list[int]],
        ks: list[int],
        action: Action,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> Proposal: ...

    def rollback(self, lengths: list[int]) -> None:
        """Forget everything after the first ``lengths[r]`` tokens of row r (no recompute)."""

    def admit(self, prompts: list[list[int]]) -> None:
        """New rows with these prompts join after the current ones."""

    def select(self, rows: list[int]) -> None:
        """Keep only ``rows`` (indices into the current rows, in their new order)."""

    def caches(self) -> list[KVCache]:
        """The KV caches it keeps (none for a lookup drafter), for inspection and tests."""
