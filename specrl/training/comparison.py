"""A trained policy against the bar on test traces, in the simulator (modeled time).

The bar of a scenario (:class:`Bar`): plain decoding, TCP, the HF heuristic, AdaEDL and the
SpecDec++-style rule tuned on validation traces, the pool rule (pool scenarios), and the best
static (k, tau, drafter) in hindsight on the test traces; above it the clairvoyant oracle. Every
controller of a row sees the same acceptance draws (:mod:`specrl.trace_evaluation`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from specrl.acceptance import AcceptancePredictor
from specrl.controllers import HFHeuristicController, PoolRuleController, StaticController, TCPController
from specrl.controllers.base import Controller
from specrl.controllers.stop_rules import AdaEDLController, SpecDecPPController
from specrl.engine.types import DEFAULT_DRAFTER
from specrl.envs import Scenario, ScenarioError, cached_traces
from specrl.envs.scenario.sources import machine_latency
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.oracle import best_static, clairvoyant_bound
from specrl.rule_tuning import fit_acceptance_predictor, tuned_rules
from specrl.tables import markdown_table
from specrl.trace_evaluation import evaluate_controller, evaluate_policy
from specrl.traces import TraceSet

if TYPE_CHECKING:
    from specrl.controllers.learned import LearnedController

# The roles of a comparison's columns; BEST_STATIC is the best static setting in hindsight.
PLAIN, TCP, HF_HEURISTIC, ADAEDL, SPECDECPP, POOL_RULE = (
    "plain",
    "tcp",
    "hf-heuristic",
    "adaedl",
    "specdec++",
    "pool-rule",
)
BEST_STATIC, PPO, ORACLE = "static", "ppo", "oracle"
#: with the best static setting in hindsight, the rules a policy must beat: the bar it is measured
#: against (not the evaluation roster, specrl.evaluation.roster.RULES); the pool rule: pool scenarios only
BAR_RULES = (TCP, HF_HEURISTIC, ADAEDL, SPECDECPP, POOL_RULE)
#: every role, in the order rows list them (``metadata.json`` keeps this order)
ROLES = (PLAIN, TCP, HF_HEURISTIC, BEST_STATIC, ADAEDL, SPECDECPP, POOL_RULE, PPO, ORACLE)
#: observations (N, n_features) -> actions (N, 2), or wider with the stop and drafter dimensions
Predict = Callable[[np.ndarray], np.ndarray]


@dataclass(frozen=True)
class StaticSetting:
    """A static (k, tau, drafter) setting."""

    k: int
    tau: float
    drafter: str = DEFAULT_DRAFTER

    def label(self) -> str:
        """``(k=.., tau=..)``, with the drafter when it is not the draft."""
        return f"(k={self.k}, tau={self.tau}" + (
            f", {self.drafter})" if self.drafter != DEFAULT_DRAFTER else ")"
        )

    def controller(self) -> StaticController:
        return StaticController(self.k, self.tau, self.drafter)


@dataclass
class Bar:
    """What a policy is measured against in one scenario: the best static setting in hindsight
    (and its tokens/s), and the settings of the tuned rules by role."""

    best_static: StaticSetting
    best_static_tokens_per_s: float
    tuned: dict[str, dict[str, Any]]
    predictor: AcceptancePredictor  # the SpecDec++-style rule's

    def rules(self, scenario: Scenario) -> dict[str, Controller]:
        """Plain decoding and the :data:`BAR_RULES` the scenario has, fresh, by role."""
        adaedl, specdecpp = self.tuned[ADAEDL], self.tuned[SPECDECPP]
        rules: dict[str, Controller] = {
            PLAIN: StaticController(0),
            TCP: TCPController(),
            HF_HEURISTIC: HFHeuristicController(),
            ADAEDL: AdaEDLController(k=adaedl["k"], gamma=adaedl["gamma"]),
            SPECDECPP: SpecDecPPController(self.predictor, **specdecpp),
        }
        if POOL_RULE in self.tuned:
            rules[POOL_RULE] = PoolRuleController(scenario.drafters, k=self.tuned[POOL_RULE]["k"])
        return rules


def geometric_mean(values: Iterable[float]) -> float:
    """The geometric mean, the summary of ratios over scenarios."""
    return float(np.exp(np.mean(np.log(list(values)))))


def best_rule_role(tokens_per_s: Mapping[str, float]) -> str:
    """The role of the fastest rule in a row of tokens/s by role, the best static setting first on ties."""
    roles = [BEST_STATIC, *(role for role in BAR_RULES if role in tokens_per_s)]
    return max(roles, key=tokens_per_s.__getitem__)


def ppo_ratios(tokens_per_s: Mapping[str, float]) -> dict[str, float]:
    """PPO's ratios in a row (tokens/s by role) to TCP, the best static setting, the best rule and
    the oracle."""
    static = tokens_per_s[BEST_STATIC]
    best_rule = tokens_per_s[best_rule_role(tokens_per_s)]
    return {
        "tcp": tokens_per_s[PPO] / tokens_per_s[TCP],
        "best static": tokens_per_s[PPO] / static,
        "best rule": tokens_per_s[PPO] / best_rule,
        "oracle": tokens_per_s[PPO] / tokens_per_s[ORACLE],
    }


@dataclass
class SimulatorRow:
    """One scenario of the comparison: tokens/s by role (:data:`ROLES`) and its :class:`Bar`."""

    tokens_per_s: dict[str, float]
    bar: Bar

    def ratios(self) -> dict[str, float]:
        return ppo_ratios(self.tokens_per_s)

    def stored(self) -> dict[str, float]:
        """Tokens/s as ``metadata.json`` of an exported policy keeps them: by role, in the order of
        :data:`ROLES`, the best static setting under ``best static (k=.., tau=..)``."""
        label = f"best static {self.bar.best_static.label()}"
        return {
            (label if role == BEST_STATIC else role): self.tokens_per_s[role]
            for role in ROLES
            if role in self.tokens_per_s
        }


class Comparison:
    """The comparison's shared footing: the pair, its latency model, the acceptance draws per
    sampled trace, the policy's tau grid and predictor (None without a stop dimension), and the
    SpecDec++-style rule's predictor."""

    def __init__(
        self,
        pair: ModelPair,
        latency: LatencyModel,
        *,
        repeats: int,
        tau_grid: Sequence[float],
        predictor: AcceptancePredictor | None,
        rule_predictor: AcceptancePredictor,
    ) -> None:
        self.pair, self.latency, self.repeats, self.tau_grid = pair, latency, repeats, tuple(tau_grid)
        self.predictor, self.rule_predictor = predictor, rule_predictor
        self._tuned: dict[str, dict[str, dict[str, Any]]] = {}

    @classmethod
    def for_policy(cls, policy: LearnedController, scenarios: Sequence[Scenario], repeats: int) -> Comparison:
        """The footing an exported ``policy`` is compared on over ``scenarios`` (of one pair): the
        pair loaded, this machine's calibration of it, the policy's tau grid and predictor, and the
        SpecDec++-style rule's predictor as ``specrl train`` fits it (the policy's own, from its stop
        dimension, else one fitted on the scenarios' train traces)."""
        pair = scenarios[0].pair.load()
        latency = machine_latency(scenarios, pair, policy.k_max, policy.drafters)
        predictor = policy.policy.predictor
        return cls(
            pair,
            latency,
            repeats=repeats,
            tau_grid=policy.tau_grid,
            predictor=predictor,
            rule_predictor=predictor
            or fit_acceptance_predictor(cached_traces(s, "train", pair) for s in scenarios),
        )

    def bar(self, scenario: Scenario, traces: TraceSet, tau_grid: Sequence[float] | None = None) -> Bar:
        """The scenario's :class:`Bar`: the best static setting over ``tau_grid`` (default: the
        policy's) on ``traces``, the rules tuned on validation traces (once per scenario)."""
        grid = self.tau_grid if tau_grid is None else tau_grid
        static = best_static(
            traces,
            self.latency,
            grid,
            count=self.repeats,
            drafters=scenario.drafters,
            rows=scenario.batch.shared_by,
        )
        return Bar(
            StaticSetting(static.k, static.tau, static.drafter),
            static.tokens_per_s,
            self.tuned(scenario),
            self.rule_predictor,
        )

    def tuned(self, scenario: Scenario) -> dict[str, dict[str, Any]]:
        """The settings of the scenario's tuned rules by role, tuned on its validation traces."""
        if scenario.name not in self._tuned:
            rules = tuned_rules(scenario, self.pair, self.latency, self.rule_predictor, self.repeats)
            self._tuned[scenario.name] = {name: rule.setting for name, rule in rules.items()}
        return self._tuned[scenario.name]

    def rules_on(self, scenario: Scenario, traces: TraceSet) -> tuple[dict[str, float], Bar]:
        """Tokens/s of every rule of the scenario's :class:`Bar` on ``traces``, with that bar."""
        bar = self.bar(scenario, traces)
        tokens_per_s = {
            role: evaluate_controller(controller, scenario, traces, self.latency, self.repeats).tokens_per_s
            for role, controller in bar.rules(scenario).items()
        }
        tokens_per_s[BEST_STATIC] = bar.best_static_tokens_per_s
        return tokens_per_s, bar

    def policy_on(self, scenario: Scenario, traces: TraceSet, predict: Predict) -> float:
        """The policy's tokens/s on ``traces`` (``predict``: its actions), on the rules' draws."""
        return evaluate_policy(
            predict, scenario, traces, self.latency, self.repeats, predictor=self.predictor
        ).tokens_per_s

    def in_simulator(self, scenario: Scenario, predict: Predict) -> SimulatorRow:
        """Every role of the scenario on its test traces (``predict``: the policy's actions)."""
        test = cached_traces(scenario, "test", self.pair)
        tokens_per_s, bar = self.rules_on(scenario, test)
        tokens_per_s[PPO] = self.policy_on(scenario, test, predict)
        tokens_per_s[ORACLE] = clairvoyant_bound(
            test, self.latency, count=self.repeats, drafters=scenario.drafters, rows=scenario.batch.shared_by
        ).tokens_per_s
        return SimulatorRow({role: tokens_per_s[role] for role in ROLES if role in tokens_per_s}, bar)


def stored_results(rows: Mapping[str, SimulatorRow], trained: Iterable[str]) -> dict[str, Any]:
    """What an exported policy's ``metadata.json`` keeps of the comparison: every row and the
    geometric mean over the ``trained`` scenarios of PPO's ratio to TCP."""
    return {
        "sim_test_tokens_per_s": {name: row.stored() for name, row in rows.items()},
        "ratio_vs_tcp_sim_test": geometric_mean(rows[name].ratios()["tcp"] for name in trained),
    }


def comparison_table(rows: Mapping[str, SimulatorRow]) -> str:
    """Markdown: per scenario, tokens/s per role ("-" where it has none) and PPO's ratios."""
    present = {role for row in rows.values() for role in row.tokens_per_s}
    names = [role for role in ROLES if role in present and role not in (BEST_STATIC, PPO, ORACLE)] + [PPO]
    columns = [*names, "best static", "oracle"]
    columns += ["PPO / TCP", "PPO / best static", "PPO / best rule", "PPO / oracle"]
    lines = []
    for scenario, row in rows.items():
        tokens, ratios = row.tokens_per_s, row.ratios()
        cells = [f"{tokens[n]:.1f}" if n in tokens else "-" for n in names] + [
            f"{tokens[BEST_STATIC]:.1f} {row.bar.best_static.label()}",
            f"{tokens[ORACLE]:.1f}",
        ]
        cells += [f"{ratios[key]:.3f}" for key in ("tcp", "best static", "best rule", "oracle")]
        lines.append([scenario, *cells])
    return markdown_table(["scenario", *columns], lines)


def simulator_section(rows: Mapping[str, SimulatorRow], selected_ratio: float, note: str) -> str:
    """The results page's section of the comparison: heading, what it is, ``note`` and the table."""
    return (
        "#### Test traces, simulator (modeled time), tokens/s\n\n"
        f"Checkpoint selected on validation traces (ratio vs TCP {selected_ratio:.3f} there); "
        "these test traces are reported once; best static and oracle are in hindsight on them (bounds). "
        f"{note}\n\n{comparison_table(rows)}\n"
    )


def unseen_note(scenarios: Iterable[Scenario], pair: ModelPair) -> str:
    """A sentence naming the scenarios whose domain has no train prompts; empty when none."""
    unseen = []
    for scenario in scenarios:
        try:
            scenario.with_overrides(split="train").prompt_sets(pair)
        except ScenarioError:
            unseen.append(scenario.name)
    if not unseen:
        return ""
    names = ", ".join(unseen)
    return f"Unseen domain (no train or validation prompts; no training or selection saw it): {names}."
