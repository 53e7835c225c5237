"""Policies on machines: each latency profile's rules, re-tuned there, against policies carried to it.

For a profile (a latency model: :mod:`specrl.latency.family`) and a scenario, :func:`profile_row`
tunes the rules of the bar on the scenario's validation traces *under that profile*, plays them,
the best static setting in hindsight and each policy on the test traces under it, all on the same
acceptance draws (:class:`~specrl.training.comparison.Comparison`), and gives every policy's ratio
to the best rule. ``experiments/profiles.py`` writes the page of every profile side by side.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from specrl.controllers.priced import PricedController
from specrl.envs import Scenario, cached_traces
from specrl.export import ExportedPolicy
from specrl.features import STEP_NORM, PriceLine
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.rule_tuning import fit_acceptance_predictor
from specrl.trace_evaluation import evaluate_controller, evaluate_policy
from specrl.training.comparison import PLAIN, Comparison, best_rule_role


@dataclass
class ProfileRow:
    """One scenario under one profile: tokens/s of plain decoding, of its best rule (``best_role``)
    and of each policy (name -> tokens/s per policy seed; :data:`PRICED`: the priced rule, which
    needs no seed), what each policy's first seed chose (:meth:`ChoiceTally.summary`), and the
    best static setting in hindsight (``best_static``, its label)."""

    profile: str
    scenario: str
    plain: float
    best_role: str
    best_rule: float
    policies: dict[str, list[float]] = field(default_factory=dict)
    choices: dict[str, dict[str, float]] = field(default_factory=dict)  # name -> its first seed's
    best_static: str = ""

    def ratios(self, name: str) -> list[float]:
        """Each seed's tokens/s of policy ``name`` over the best rule's."""
        return [value / self.best_rule for value in self.policies[name]]


PRICED = "priced rule"  # specrl.controllers.priced: not a rule of the bar, a teacher of the warm start


class ChoiceTally:
    """A policy's actions on traces (``evaluate_policy``'s ``record``): how many steps were plain
    (k = 0), how many drafted with each drafter, and their k."""

    def __init__(self, drafters: Sequence[str]) -> None:
        self.drafters = tuple(drafters)
        self.steps: Counter[str] = Counter()
        self.k = 0

    def __call__(self, actions: np.ndarray) -> None:
        ks = actions[:, 0].astype(int)
        self.k += int(ks.sum())
        self.steps["plain"] += int((ks == 0).sum())
        drafting = actions[ks > 0]
        which = drafting[:, -1].astype(int) if len(self.drafters) > 1 else np.zeros(len(drafting), int)
        self.steps.update(self.drafters[i] for i in which)

    def summary(self) -> dict[str, float]:
        """The share of steps that were plain and that drafted with each drafter (most first), and
        the mean k over every step."""
        total = sum(self.steps.values()) or 1
        shares = {name: count / total for name, count in self.steps.most_common() if count}
        return {**shares, "mean_k": self.k / total}


def policy_predict(policy: ExportedPolicy):
    """The policy's actions on full observations (it reads its version's first features)."""
    return lambda observations: policy.predict(np.asarray(observations)[:, : policy.n_features])


def profile_row(
    pair: ModelPair,
    profile: str,
    latency: LatencyModel,
    scenario: Scenario,
    policies: Mapping[str, Sequence[ExportedPolicy]],
    *,
    repeats: int,
    rule_predictor,
    split: str = "test",
) -> ProfileRow:
    """The scenario's rules re-tuned under ``latency`` and every policy's seeds on its test traces
    (``split``: or its validation traces, to choose between policies without the test ones)."""
    first = next(p for seeds in policies.values() for p in seeds)
    footing = Comparison(
        pair,
        latency.for_sampling(scenario.sampling),
        repeats=repeats,
        tau_grid=first.tau_grid,
        predictor=first.predictor,
        rule_predictor=rule_predictor,
    )
    test = cached_traces(scenario, split, pair)
    tokens, bar = footing.rules_on(scenario, test)
    best = best_rule_role(tokens)
    row = ProfileRow(profile, scenario.name, tokens[PLAIN], best, tokens[best])
    row.best_static = bar.best_static.label()
    priced = evaluate_controller(PricedController(), scenario, test, footing.latency, repeats)
    row.policies[PRICED] = [priced.tokens_per_s]
    for name, seeds in policies.items():
        tally = ChoiceTally(seeds[0].drafters)
        row.policies[name] = [
            evaluate_policy(
                policy_predict(policy),
                scenario,
                test,
                footing.latency,
                repeats,
                predictor=policy.predictor,
                record=tally if seed == 0 else None,
            ).tokens_per_s
            for seed, policy in enumerate(seeds)
        ]
        row.choices[name] = tally.summary()
    return row


def rule_predictor_of(scenarios: Iterable[Scenario], pair: ModelPair):
    """The SpecDec++-style rule's acceptance predictor, fitted as a training run fits it: on the
    train traces of ``scenarios``."""
    return fit_acceptance_predictor([cached_traces(s, "train", pair) for s in scenarios])


def prices(latency: LatencyModel, rows: int = 1, context: int = 256) -> tuple[float, float]:
    """The profile's (draft_price, verify_token_price) as the features read them."""
    line: PriceLine = latency.price_line(rows, context)
    return line.ratios(rows)


def curve_steps(latency: LatencyModel, rows: int = 1, context: int = 256) -> list[float]:
    """What the 2nd..9th token a row adds to a verification, over a one-token one: the shape
    features before their scale and clip."""
    return [step * STEP_NORM for step in latency.price_line(rows, context).shape()]
