"""Per-token stop rules from the literature, as controllers: draft up to a cap ``k`` and decide
after every drafted token, through the engine's per-token hook (:class:`specrl.engine.types.StopRule`),
whether to keep drafting. The trace-replay simulator asks the same rules with the recorded
signals, so both replay exactly.

- :class:`AdaEDLController`: AdaEDL (Agrawal, Jeon and Lee, 2024, arXiv:2410.18351): stop when
  the entropy lower bound on the acceptance probability, ``1 - sqrt(gamma * H(q))``, falls below
  ``lambda``, which follows the running rejection rate.
- :class:`SpecDecPPController`: SpecDec++-style (Huang, Guo and Wang, COLM 2025,
  arXiv:2405.19715), with :class:`AcceptancePredictor` (a logistic regression on the draft's
  signals) in place of the paper's trained head: stop when the predicted acceptance of the next
  token (``cumulative=False``) or of every token drafted so far (the paper's criterion) falls
  below ``threshold``. Both are tuned on validation traces (:mod:`specrl.rule_tuning`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from specrl.acceptance import AcceptancePredictor
from specrl.engine.types import Action, StepResult, StopRule

# ---- AdaEDL ---------------------------------------------------------------------------------


class EntropyBound:
    """AdaEDL's stop rule: stop when ``1 - sqrt(gamma * entropy) < lam``.

    For a draft distribution q and any target p, the acceptance probability of a token drawn
    from q is ``1 - TV(p, q)``; AdaEDL bounds it from below by ``1 - sqrt(gamma * H(q))``.
    """

    def __init__(self, gamma: float, lam: float) -> None:
        self.gamma, self.lam = gamma, lam

    def __call__(self, position: int, confidence: float, entropy: float) -> bool:
        return 1.0 - math.sqrt(self.gamma * max(entropy, 0.0)) < self.lam


class AdaEDLController:
    """AdaEDL: draft up to ``k`` tokens, stop early on the entropy bound (see the module doc).

    After every step that proposed tokens, ``lambda <- beta * lambda + (1 - beta) * (1 - a / m)``
    (our reading of the paper's adaptive threshold); ``gamma`` is tuned on validation.

    Args:
        k: the cap on draft tokens per step.
        gamma: scale of the entropy in the bound (> 0).
        lambda_init: the threshold before any step has been seen, in [0, 1].
        beta: smoothing of the threshold's moving average, in [0, 1).
    """

    def __init__(self, k: int = 8, gamma: float = 0.5, lambda_init: float = 0.3, beta: float = 0.9) -> None:
        if gamma <= 0:
            raise ValueError(f"AdaEDL gamma must be > 0, got {gamma}")
        if not 0.0 <= lambda_init <= 1.0 or not 0.0 <= beta < 1.0:
            raise ValueError(
                f"AdaEDL needs lambda_init in [0, 1] and beta in [0, 1), got {lambda_init}, {beta}"
            )
        self.k, self.gamma, self.lambda_init, self.beta = k, gamma, lambda_init, beta
        self.rule = EntropyBound(gamma, lambda_init)
        self.action = Action(k, 0.0, stop=self.rule)

    def reset(self) -> None:
        self.rule.lam = self.lambda_init

    def act(self, observation: Any) -> Action:
        return self.action

    def observe(self, result: StepResult) -> None:
        if result.proposed:
            rejection_rate = 1.0 - result.accepted / result.proposed
            self.rule.lam = self.beta * self.rule.lam + (1.0 - self.beta) * rejection_rate

    @property
    def name(self) -> str:
        return f"adaedl:k={self.k},gamma={self.gamma:g}"

    def __repr__(self) -> str:
        return (
            f"AdaEDLController(k={self.k}, gamma={self.gamma}, lambda_init={self.lambda_init}, "
            f"beta={self.beta})"
        )


# ---- SpecDec++-style ------------------------------------------------------------------------


class AcceptanceThreshold:
    """Stop rule: stop when the predicted acceptance probability of the drafted token
    (``cumulative=False``), or of all tokens drafted so far in this step (``cumulative=True``,
    the product of the per-token predictions), falls below ``threshold``."""

    def __init__(self, predictor: AcceptancePredictor, threshold: float, cumulative: bool = False) -> None:
        self.predictor, self.threshold, self.cumulative = predictor, threshold, cumulative
        self.survival = 1.0  # predicted P(every token drafted so far in this step is accepted)

    def __call__(self, position: int, confidence: float, entropy: float) -> bool:
        probability = self.predictor.probability(confidence, entropy)
        if not self.cumulative:
            return probability < self.threshold
        self.survival = probability if position == 0 else self.survival * probability
        return self.survival < self.threshold


class SpecDecPPController:
    """SpecDec++-style: draft up to ``k``, stop when the predicted acceptance probability of the
    next token (or, ``cumulative``, of every token drafted so far) is below ``threshold`` (see
    the module doc). Stateless between steps.

    Args:
        predictor: the fitted :class:`AcceptancePredictor`.
        threshold: in [0, 1]; 0 never stops early (a static k).
        k: the cap on draft tokens per step.
        cumulative: the paper's criterion (product over the step) instead of the next token's.
    """

    def __init__(
        self, predictor: AcceptancePredictor, threshold: float = 0.5, k: int = 8, cumulative: bool = False
    ) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"SpecDec++ threshold must lie in [0, 1], got {threshold}")
        self.predictor, self.threshold, self.k, self.cumulative = predictor, threshold, k, cumulative
        self.action = Action(k, 0.0, stop=AcceptanceThreshold(predictor, threshold, cumulative))

    def reset(self) -> None:
        """Nothing to forget."""

    def act(self, observation: Any) -> Action:
        return self.action

    def observe(self, result: StepResult) -> None:
        """Ignored: the rule looks at the drafted token only."""

    @property
    def name(self) -> str:
        form = ",cumulative" if self.cumulative else ""
        return f"specdec++:k={self.k},threshold={self.threshold:g}{form}"

    def __repr__(self) -> str:
        return (
            f"SpecDecPPController({self.predictor!r}, threshold={self.threshold}, k={self.k}, "
            f"cumulative={self.cumulative})"
        )


def stop_rule_table(
    predictor: AcceptancePredictor | None, grid: Sequence[float]
) -> tuple[StopRule | None, ...]:
    """The per-token stop rule of each stop index of an action: index i stops drafting when the
    predicted probability that every token drafted so far in the step is accepted falls below
    ``grid[i]`` (cumulative :class:`AcceptanceThreshold`); a threshold of 0 is no rule (None).
    Without a predictor there is one index, no rule."""
    if predictor is None:
        return (None,)
    return tuple(None if h == 0 else AcceptanceThreshold(predictor, h, cumulative=True) for h in grid)
