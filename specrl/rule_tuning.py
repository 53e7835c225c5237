"""Fit and tune the rule baselines in the trace-replay simulator: the SpecDec++-style rule's
acceptance predictor on *train* traces, its threshold and AdaEDL's gamma by throughput on
*validation* traces (docs/design.md section 4b), the footing of a learned policy's selection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np

from specrl.controllers.base import Controller
from specrl.controllers.pool_rule import PoolRuleController
from specrl.controllers.stop_rules import AcceptancePredictor, AdaEDLController, SpecDecPPController
from specrl.envs import cached_traces
from specrl.envs.scenario import Scenario, ScenarioError, load_scenario
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.trace_evaluation import evaluate_controller
from specrl.traces import TraceSet

SPECDECPP_THRESHOLDS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)
ADAEDL_GAMMAS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5)
CAPS = (4, 6, 8)
POOL_RULE_KS = (1, 2, 4, 6)  # the pool rule's k, as experiments/bench_drafters.py tries them


def on_trajectory_signals(traces: TraceSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(confidence, entropy, acceptance probability) at every emitted position of every trace
    (not past a segment's end, where no step proposes)."""
    a = traces.arrays
    keep = np.concatenate(
        [
            np.arange(int(offset), int(offset) + int(end))
            for offset, end in zip(a["segment_offset"], a["segment_end"], strict=True)
        ]
        or [np.zeros(0, dtype=np.int64)]
    )
    return a["confidence"][keep], a["entropy"][keep], a["accept_prob"][keep]


def fit_acceptance_predictor(train_traces: Iterable[TraceSet]) -> AcceptancePredictor:
    """A logistic regression of acceptance on the draft's signals over all given train traces."""
    sets = list(train_traces)
    if any(t.meta.get("split") != "train" for t in sets):
        raise ValueError(
            "the acceptance predictor is fitted on train traces only; got splits "
            f"{sorted({str(t.meta.get('split')) for t in sets})}"
        )
    signals = [on_trajectory_signals(t) for t in sets]
    confidence, entropy, target = (np.concatenate(column) for column in zip(*signals, strict=True))
    return AcceptancePredictor.fit(
        confidence,
        entropy,
        target,
        metadata={
            "pair": sets[0].meta.get("pair"),
            "scenarios": sorted({str(t.meta.get("scenario")) for t in sets}),
            "split": "train",
        },
    )


@dataclass
class Tuned:
    """The best setting of a rule on validation traces and the whole grid it was chosen from."""

    name: str
    setting: dict[str, Any]
    tokens_per_s: float
    grid: list[dict[str, Any]]
    controller: Controller


def tune_controller(
    name: str,
    make: Callable[..., Controller],
    grid: Sequence[dict[str, Any]],
    scenario: Scenario,
    validation: TraceSet,
    latency: LatencyModel,
    repeats: int = 1,
    seed: int = 0,
) -> Tuned:
    """The setting of ``grid`` (keyword arguments of ``make``) with the highest throughput over
    the ``validation`` traces in the simulator; every setting sees the same acceptance draws."""
    if validation.meta.get("split") == "test":
        raise ValueError("rules are tuned on validation (or train) traces, never on test traces")
    results = []
    for setting in grid:
        summary = evaluate_controller(make(**setting), scenario, validation, latency, repeats, seed)
        results.append({**setting, "tokens_per_s": summary.tokens_per_s})
    best = max(range(len(grid)), key=lambda i: results[i]["tokens_per_s"])
    return Tuned(name, dict(grid[best]), results[best]["tokens_per_s"], results, make(**grid[best]))


def tune_specdecpp(
    predictor: AcceptancePredictor,
    scenario: Scenario,
    validation: TraceSet,
    latency: LatencyModel,
    repeats: int = 1,
    thresholds: Sequence[float] = SPECDECPP_THRESHOLDS,
    caps: Sequence[int] = CAPS,
) -> Tuned:
    """SpecDec++'s threshold, cap k and form (per token or cumulative), chosen on validation traces."""
    grid = [
        {"threshold": t, "k": k, "cumulative": cumulative}
        for cumulative in (False, True)
        for k in caps
        if k <= scenario.k_max
        for t in thresholds
    ]
    make = partial(SpecDecPPController, predictor)
    return tune_controller("specdec++", make, grid, scenario, validation, latency, repeats)


def tune_adaedl(
    scenario: Scenario,
    validation: TraceSet,
    latency: LatencyModel,
    repeats: int = 1,
    gammas: Sequence[float] = ADAEDL_GAMMAS,
    caps: Sequence[int] = CAPS,
) -> Tuned:
    """AdaEDL's gamma and cap k, chosen on validation traces."""
    grid = [{"gamma": g, "k": k} for k in caps if k <= scenario.k_max for g in gammas]
    return tune_controller("adaedl", AdaEDLController, grid, scenario, validation, latency, repeats)


def fitting_traces(scenario: Scenario, pair: ModelPair, split: str) -> tuple[Scenario, TraceSet]:
    """The scenario and ``split`` traces ("train" or "validation") to fit or tune a rule for
    ``scenario`` with: its own, or, without prompts in that split (the unseen test domain), the
    mixed workload's at the same temperature."""
    if split == "test":
        raise ValueError("rules are fitted and tuned on train or validation traces, never on test")
    try:
        return scenario, cached_traces(scenario, split, pair)
    except ScenarioError:
        name = "mixed" if scenario.sampling.temperature == 0 else "mixed_t1"
        mixed = load_scenario(name).with_overrides(time="modeled", preset=scenario.pair.preset)
        return mixed, cached_traces(mixed, split, pair)


def rule_predictor(scenario: Scenario, pair: ModelPair) -> AcceptancePredictor:
    """The SpecDec++-style rule's predictor for ``scenario``: fitted on its train traces."""
    return fit_acceptance_predictor(
        [fitting_traces(scenario.with_overrides(time="modeled"), pair, "train")[1]]
    )


def tuned_rules(
    scenario: Scenario,
    pair: ModelPair,
    latency: LatencyModel,
    predictor: AcceptancePredictor,
    repeats: int = 1,
) -> dict[str, Tuned]:
    """AdaEDL, the SpecDec++-style rule and, in a pool scenario, the pool rule's k, tuned for
    ``scenario`` on validation traces, by name."""
    tuning, validation = fitting_traces(scenario.with_overrides(time="modeled"), pair, "validation")
    rules = [
        tune_adaedl(tuning, validation, latency, repeats),
        tune_specdecpp(predictor, tuning, validation, latency, repeats),
    ]
    if len(scenario.drafters) > 1:
        pool = partial(PoolRuleController, scenario.drafters)
        grid = [{"k": k} for k in POOL_RULE_KS]
        rules.append(tune_controller("pool-rule", pool, grid, tuning, validation, latency, repeats))
    return {tuned.name: tuned for tuned in rules}
