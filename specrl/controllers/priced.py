"""The k the machine's prices make fastest: the observation's ``priced_k``, with a probe.

:mod:`specrl.features` (version 5) prices every k from 0 to 8 at the recent acceptance: a step
drafting k tokens is expected to emit ``1 + a + ... + a^k`` tokens a row for
``draft_price * k + c(k + 1) / c(1)`` one-token verifications, where ``c`` is the machine's
verification curve. This rule plays that k (with no confidence cut). It needs no tuning and no
training, and it carries to any machine whose prices the features read; it is the warm start's
teacher wherever it is the fastest rule on validation (:mod:`specrl.training.warm_start`).
It is not in the bar the learned controller is compared with: that holds the rules others ship.

A rule that stops drafting stops measuring acceptance, so after :data:`PROBE_AFTER` steps without
a draft it drafts one token, and the acceptance it measures decides the next k.
"""

from __future__ import annotations

from typing import Any

from specrl.engine.types import Action, StepResult
from specrl.features import FEATURE_NAMES, K_NORM, Prices
from specrl.latency.calibration import machine_prices

PRICED_K = FEATURE_NAMES.index("priced_k")
STEPS_SINCE_DRAFT = FEATURE_NAMES.index("steps_since_draft")
PROBE_AFTER = 8  # steps without a draft before one probe token


class PricedController:
    """Plays the observation's ``priced_k`` (feature version 5), probing with one token after
    :data:`PROBE_AFTER` plain steps."""

    def reset(self) -> None:
        """Nothing to forget: the features hold the history."""

    def act(self, observation: Any) -> Action:
        if len(observation) <= PRICED_K:
            raise ValueError(
                f"PricedController reads feature {PRICED_K} (priced_k, feature version 5), but the "
                f"observation has {len(observation)} features"
            )
        k = round(float(observation[PRICED_K]) * K_NORM)
        if k == 0 and round(float(observation[STEPS_SINCE_DRAFT]) * K_NORM) >= PROBE_AFTER:
            k = 1
        return Action(k=k, tau=0.0)

    def observe(self, result: StepResult) -> None:
        """The features hold what it needs."""

    def machine_prices(self, pair: Any) -> Prices | None:
        """This machine's cached calibrations of ``pair`` as the prices' prior when a loop is given
        none (:func:`specrl.latency.calibration.machine_prices`)."""
        return machine_prices(pair, "PricedController")

    def __repr__(self) -> str:
        return "PricedController()"
