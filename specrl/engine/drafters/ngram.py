"""Prompt-lookup drafting (HF's prompt lookup, vLLM's ``ngram``): propose what followed the latest
earlier occurrence of the text's last n tokens (n from ``max_ngram`` down to ``min_ngram``). The
proposal is a function of the sequence, so q is a point mass: the rule stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from specrl.engine.cache import on_device
from specrl.engine.drafters.base import Proposal
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action


class NGramIndex:
    """The n-gram index of one sequence: for each n, the latest position that followed every n-gram.
    Like a KV cache it covers a prefix of the sequence and a call extends it by the new tokens; a
    sequence that does not extend the indexed prefix is indexed afresh."""

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram} and {max_ngram}")
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self._forget()

    def _forget(self) -> None:
        self._indexed = np.empty(0, dtype=np.int64)  # the prefix the index describes
        # n -> {n-gram: the position that followed its latest occurrence}
        self._latest: dict[int, dict[tuple[int, ...], int]] = {
            n: {} for n in range(self.min_ngram, self.max_ngram + 1)
        }

    def _index(self, tokens: np.ndarray) -> None:
        """Extend the index to ``tokens`` (or rebuild it if they do not extend its prefix)."""
        seen = len(self._indexed)
        if seen > len(tokens) or tokens[:seen].tobytes() != self._indexed.tobytes():  # a memcmp
            self._forget()
            seen = 0
        if seen == len(tokens):
            return
        first = max(seen, 1)  # position p follows the n-grams that end at p - 1
        offset = max(0, first - self.max_ngram)
        text = tokens[offset:].tolist()
        for p in range(first, len(tokens)):
            i = p - offset
            for n in range(self.min_ngram, min(self.max_ngram, p) + 1):
                self._latest[n][tuple(text[i - n : i])] = p
        self._indexed = tokens.copy()

    def longest_match(self, sequence: Sequence[int] | torch.Tensor) -> tuple[int, int] | None:
        """(L,) -> (n, start): the length n of the longest tail that occurred earlier (the tail
        itself does not count), and where the text that followed its latest earlier occurrence
        starts; None without a match."""
        tokens = _array(sequence)
        self._index(tokens)
        length = len(tokens)
        tail = tokens[max(0, length - self.max_ngram) :].tolist()
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            start = self._latest[n].get(tuple(tail[len(tail) - n :]))
            if start is not None:
                return n, start
        return None

    def found(self, sequence: Sequence[int] | torch.Tensor) -> tuple[int, int]:
        """What the lookup finds now: (tokens it could propose, the order n of its match), (0, 0)
        without a match (the ``lookup_available`` and ``lookup_order`` features)."""
        match = self.longest_match(sequence)
        return (0, 0) if match is None else (len(sequence) - match[1], match[0])

    def lookup(self, sequence: Sequence[int] | torch.Tensor, k: int) -> list[int]:
        """(L,) -> up to k tokens that followed the latest earlier match of the longest matching tail."""
        match = self.longest_match(sequence)  # indexes the sequence; the proposal is a slice of it
        return [] if match is None else [int(x) for x in sequence[match[1] : match[1] + k]]


def lookup_proposal(
    index: NGramIndex, sequence: Sequence[int] | np.ndarray | torch.Tensor, k: int, action: Action
) -> tuple[list[int], list[float], bool]:
    """One row's n-gram proposal under ``action``: (up to k tokens, their confidences, whether
    drafting stopped before k). Each token is a point mass (confidence 1, entropy 0) that the
    action's tau or stop rule may still cut; finding fewer than k counts as a stop, as a draft
    model's early stop does."""
    tokens = index.lookup(sequence, k) if k else []
    looked: list[float] = []
    for i in range(len(tokens)):
        looked.append(1.0)
        if action.halts(i, 1.0, 0.0):
            return tokens[:i], looked, True
    return tokens, looked, len(tokens) < k


def _array(sequence: Sequence[int] | torch.Tensor) -> np.ndarray:
    if isinstance(sequence, torch.Tensor):
        return sequence.cpu().numpy()
    return np.asarray(sequence, dtype=np.int64)


class NGramDrafter:
    """Point-mass proposals by n-gram lookup, one :class:`NGramIndex` per row. Rollback needs
    nothing: the next lookup checks that its index is a prefix of the row's sequence."""

    def __init__(
        self,
        vocab_size: int,
        max_ngram: int = 3,
        min_ngram: int = 1,
        name: str = "ngram",
        rows: int = 0,
        device: torch.device | str = "cpu",
    ) -> None:
        NGramIndex(max_ngram, min_ngram)  # checks the orders
        self.name = name
        self.vocab_size = vocab_size
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.indices = [NGramIndex(max_ngram, min_ngram) for _ in range(rows)]
        self.device = torch.device(device)

    def propose(
        self,
        sequences: list[list[int]],
        ks: list[int],
        action: Action,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> Proposal:
        found, confidences, stopped = [], [], []
        for index, sequence, k in zip(self.indices, sequences, ks, strict=True):
            tokens, looked, halted = lookup_proposal(index, sequence, k, action)
            found.append(tokens)
            confidences.append(looked)
            stopped.append(halted)
        width = max(map(len, found), default=0)
        table = [tokens + [0] * (width - len(tokens)) for tokens in found]
        proposal = on_device(table, self.device).view(len(found), width)  # (B, w)
        q = F.one_hot(proposal, self.vocab_size).float()  # (B, w, V)
        entropies = [[0.0] * len(looked) for looked in confidences]
        return Proposal(proposal, q, [len(tokens) for tokens in found], confidences, entropies, stopped)

    def rollback(self, lengths: list[int]) -> None:
        """Nothing to do: the next lookup checks that its index is a prefix of the sequence."""

    def admit(self, prompts: list[list[int]]) -> None:
        self.indices += [NGramIndex(self.max_ngram, self.min_ngram) for _ in prompts]

    def select(self, rows: list[int]) -> None:
        self.indices = [self.indices[r] for r in rows]

    def caches(self) -> list:
        return []
