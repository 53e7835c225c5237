"""Logits -> the distribution both models are sampled from, identically processed."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingConfig:
    """Temperature / top-k / top-p, applied identically to target (p) and draft (q).

    ``temperature == 0`` is greedy decoding: tokens are argmaxes, and the distribution
    returned by :meth:`probs` (used for the draft's confidence) is the softmax of the
    raw logits after top-k/top-p.
    """

    temperature: float = 0.0
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    def probs(self, logits: torch.Tensor) -> torch.Tensor:
        """(..., V) logits -> (..., V) probabilities, in float32."""
        logits = logits.float()
        if not self.greedy:
            logits = logits / self.temperature
        if self.top_k and self.top_k < logits.shape[-1]:
            kth = torch.topk(logits, self.top_k, dim=-1).values[..., -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if self.top_p < 1.0:
            sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
            cumulative = sorted_logits.softmax(-1).cumsum(-1)
            # drop a token when the mass before it already reaches top_p (keeps at least one)
            drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= self.top_p
            drop = drop_sorted.scatter(-1, order, drop_sorted)
            logits = logits.masked_fill(drop, float("-inf"))
        return logits.softmax(-1)

    def choose(self, probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """(B, V) -> (B,) token ids: argmax when greedy, else one draw."""
        if self.greedy:
            return probs.argmax(-1)
        return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """(..., V) -> (...,) entropy in nats."""
    return -(probs * probs.clamp_min(1e-12).log()).sum(-1)
