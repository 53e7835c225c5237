"""Modeled time of a speculative step: a per-forward cost model, deterministic.

The placeholder for the calibrated latency model of issue 4 (``specrl/latency.py``): the
same interface, ``seconds(result) -> (draft_seconds, verify_seconds)``, with three constants
instead of a profile of the device.
"""

from __future__ import annotations

from dataclasses import dataclass

from specrl.engine.types import StepResult


@dataclass(frozen=True)
class CostModel:
    """draft = draft_forward_s * draft forwards; verify = target_forward_s + target_per_token_s * m.

    A step runs one draft forward per drafted position (the one that stopped drafting under
    tau included) and one target forward over the last emitted token plus the m proposals.
    The defaults are the embedded "small" pair on 2 CPU cores (DESIGN.md section 7): a
    target forward ~9 ms, verifying 8 tokens ~1.5x one, a draft forward ~0.5 ms.

    Attributes:
        draft_forward_s: seconds per draft forward.
        target_forward_s: seconds of a target forward over one new token (a plain step).
        target_per_token_s: extra seconds per additional verified position.
    """

    draft_forward_s: float = 0.0005
    target_forward_s: float = 0.009
    target_per_token_s: float = 0.0006

    def __post_init__(self) -> None:
        for name in ("draft_forward_s", "target_forward_s", "target_per_token_s"):
            value = getattr(self, name)
            if not value >= 0:  # also refuses NaN
                raise ValueError(f"{name} must be >= 0 seconds, got {value!r}")
        if self.target_forward_s <= 0:
            raise ValueError("target_forward_s must be > 0: a target forward cannot be free")

    @property
    def plain_tokens_per_s(self) -> float:
        """Throughput of plain decoding (k = 0) under this model."""
        return 1.0 / self.target_forward_s

    def seconds(self, result: StepResult) -> tuple[float, float]:
        """(draft seconds, verify seconds) of a step."""
        draft = self.draft_forward_s * result.draft_forwards
        verify = self.target_forward_s + self.target_per_token_s * result.proposed
        return draft, verify
