"""Prompt-lookup drafting: propose what followed the latest earlier occurrence of the text's tail.

As HF's prompt-lookup decoding (Saxena 2023) and vLLM's ``ngram`` speculator, without a model:
the last n tokens (n from ``max_ngram`` down to ``min_ngram``) are searched for in the prompt and
the text generated so far, and the tokens that followed the most recent match are proposed. The
proposal is a function of the sequence, so q is a point mass on it: a proposed token is accepted
with probability p(x), and a rejection draws from norm(max(0, p - q)), which is p with x removed.
The output is exact for sampling as for greedy decoding.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from specrl.engine.drafters.base import Proposal
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action


class NGramDrafter:
    """Point-mass proposals by n-gram lookup; stateless, so rollback is free."""

    def __init__(self, vocab_size: int, max_ngram: int = 3, min_ngram: int = 1, name: str = "ngram") -> None:
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram} and {max_ngram}")
        self.name = name
        self.vocab_size = vocab_size
        self.max_ngram, self.min_ngram = max_ngram, min_ngram

    def match_start(self, sequence: torch.Tensor) -> int | None:
        """(L,) -> where the text that followed the latest earlier match of the longest matching
        tail starts (the lookup proposes from there), or None without a match.

        A window starting at i matches when sequence[i + j] == sequence[L - n + j] for j < n, and
        it must end before the last token (i < L - n). On CPU the comparison runs in numpy on the
        tensor's own memory: a policy asks this before every step (``lookup_available``), and
        numpy does it in a fraction of torch's per-op overhead."""
        length = sequence.shape[0]
        tokens = sequence.numpy() if sequence.device.type == "cpu" else sequence
        for n in range(min(self.max_ngram, length - 1), self.min_ngram - 1, -1):
            hits = tokens[: length - n] == tokens[length - n]
            for j in range(1, n):
                hits = hits & (tokens[j : length - n + j] == tokens[length - n + j])
            found = hits.nonzero()[0] if isinstance(hits, np.ndarray) else hits.nonzero()[:, 0]
            if len(found):
                return int(found[-1]) + n  # the latest occurrence; what followed it
        return None

    def lookup(self, sequence: torch.Tensor, k: int) -> torch.Tensor:
        """(L,) -> up to k tokens that followed the latest earlier match of the longest matching tail."""
        start = self.match_start(sequence)
        return sequence[:0] if start is None else sequence[start : start + k]

    def available(self, sequence: torch.Tensor) -> int:
        """How many tokens a lookup could propose now (any k): 0 without a match."""
        start = self.match_start(sequence)
        return 0 if start is None else sequence.shape[0] - start

    def propose(
        self,
        tokens: torch.Tensor,
        k: int,
        action: Action,
        sampling: SamplingConfig,
        generator: torch.Generator | None,
    ) -> Proposal:
        found = self.lookup(tokens[0], k) if k else tokens[0, :0]
        confidences: list[float] = []
        for i in range(found.shape[0]):  # a point mass: confidence 1, entropy 0
            confidences.append(1.0)
            if action.halts(i, 1.0, 0.0):
                found, stopped = found[:i], True
                break
        else:
            stopped = found.shape[0] < k
        proposal = found[None]  # (1, m), m = 0 included
        q = F.one_hot(proposal, self.vocab_size).float()
        return Proposal(proposal, q, confidences, [0.0] * len(confidences), stopped)

    def rollback(self, length: int) -> None:
        """Nothing to forget: the lookup reads the sequence it is given."""

    def caches(self) -> list:
        return []
