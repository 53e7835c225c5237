"""The k the machine's prices make fastest: the observation's ``priced_k`` (feature version 5),
which prices every k from 0 to 8 at the recent acceptance on the machine's verification curve.
It needs no tuning nor training and carries to any machine whose prices the features read; it is
the warm start's teacher where it is the fastest rule on validation, not part of the bar. A rule
that stops drafting stops measuring acceptance, so after :data:`PROBE_AFTER` steps without a
draft it drafts one token.
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
