"""The k the machine's prices make fastest: the observation's ``priced_k_runs``, with a probe.

:mod:`specrl.features` prices every k from 0 to 8 at the recent acceptance: a step drafting k
tokens is expected to emit ``1 + a1 + a1 a2 + ... + a1...ak`` tokens a row for
``draft_price * k + c(k + 1) / c(1)`` one-token verifications, where ``c`` is the machine's
verification curve and ``ai`` the acceptance the recent drafts measured at position i
(``priced_k_runs``, feature version 6; ``priced_k``, version 5, takes one recent acceptance for
every position). This rule plays that k (with no confidence cut). It needs no tuning and no
training, and it carries to any machine whose prices the features read; it is the warm start's
teacher wherever it is the fastest rule on validation (:mod:`specrl.training.warm_start`).
It is not in the bar the learned controller is compared with: that holds the rules others ship.

A rule that stops drafting stops measuring acceptance, so after :data:`PROBE_AFTER` steps without
a draft it drafts one token, and the acceptance it measures decides the next k.
"""

from __future__ import annotations

from typing import Any

from specrl.engine.types import Action, StepResult
from specrl.features import FEATURE_COUNTS, FEATURE_NAMES, K_NORM, Prices
from specrl.latency.calibration import machine_prices

PRICED_FEATURES = ("priced_k_runs", "priced_k")  # the newest first
STEPS_SINCE_DRAFT = FEATURE_NAMES.index("steps_since_draft")
PROBE_AFTER = 8  # steps without a draft before one probe token


class PricedController:
    """Plays the observation's ``feature`` (one of :data:`PRICED_FEATURES`; default the newest,
    ``priced_k_runs``), probing with one token after :data:`PROBE_AFTER` plain steps."""

    def __init__(self, feature: str = PRICED_FEATURES[0]) -> None:
        if feature not in PRICED_FEATURES:
            raise ValueError(f"PricedController plays one of {PRICED_FEATURES}, not {feature!r}")
        self.feature, self.index = feature, FEATURE_NAMES.index(feature)

    def reset(self) -> None:
        """Nothing to forget: the features hold the history."""

    def act(self, observation: Any) -> Action:
        if len(observation) <= self.index:
            version = min(v for v, count in FEATURE_COUNTS.items() if count > self.index)
            raise ValueError(
                f"PricedController reads feature {self.index} ({self.feature}, feature version "
                f"{version}), but the observation has {len(observation)} features"
            )
        k = round(float(observation[self.index]) * K_NORM)
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
        return f"PricedController({self.feature!r})"
