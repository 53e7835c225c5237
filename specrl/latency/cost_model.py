"""The three constants of the ``constant`` latency model (scenario ``latency: constant``), which
``LatencyModel.from_cost_model`` turns into a model that ignores context and device."""

from __future__ import annotations

from dataclasses import dataclass

# The constant model's prices of the other drafters, relative to the draft, per drafted position:
# the small pair on 2 CPU cores (results/drafters/drafters.md, cost / verify over the draft's,
# median over domains). The calibrated model measures its own (specrl.latency.drafters).
CONSTANT_DRAFTER_COSTS = {
    "draft-mid": 1.86,
    "draft-int8": 1.27,
    "draft-int4": 3.85,
    "ngram": 0.05,
    "cascade": 2.35,
}


@dataclass(frozen=True)
class CostModel:
    """draft = draft_forward_s per draft forward; verify = target_forward_s + target_per_token_s * m
    for m proposals. The defaults are about the embedded "small" pair on 2 CPU cores."""

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
