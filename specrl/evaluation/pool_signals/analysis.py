"""One pool scenario: the best static setting and the clairvoyant oracle on the report split, and
per signal set a table policy fit on the fit split (and, optimistic, on the report split itself),
scored on the report split."""

from __future__ import annotations

from specrl.envs import cached_traces, load_scenario
from specrl.evaluation.pool_signals.signals import SIGNAL_SETS
from specrl.evaluation.pool_signals.table_policy import SEED, Split, fit_table, label_of
from specrl.latency import calibrated
from specrl.models import ModelPair
from specrl.oracle import best_static, clairvoyant_bound, static_settings


def analyse(name: str, fit_split: str, split: str, count: int) -> tuple[dict, ModelPair]:
    """The row of scenario ``name`` (modeled time, the pair's calibrated latency model over the
    scenario's drafters; ``count`` acceptance draws per sampled trace) and the pair it loaded."""
    scenario = load_scenario(name).with_overrides(time="modeled")
    pair = scenario.pair.load()
    latency = calibrated(pair, k_max=scenario.k_max, drafters=scenario.drafters)
    fit = Split(cached_traces(scenario, fit_split, pair), scenario, pair, latency, count)
    report = Split(cached_traces(scenario, split, pair), scenario, pair, latency, count)
    static = best_static(
        report.traces, latency, scenario.tau_grid, count=count, seed=SEED, drafters=scenario.drafters
    )
    best = (static.k, static.tau, static.drafter)
    oracle = clairvoyant_bound(report.traces, latency, count=count, seed=SEED, drafters=scenario.drafters)
    settings = static_settings(scenario.k_max, [0.0], scenario.drafters)
    row = {
        "traces": {fit_split: len(fit.traces.traces), split: len(report.traces.traces)},
        "best_static": {"k": static.k, "drafter": static.drafter, "tokens_per_s": static.tokens_per_s},
        "clairvoyant": oracle.tokens_per_s,
        "signals": {},
    }
    for label, keys in SIGNAL_SETS.items():
        table = fit_table(fit, keys, settings, best)
        in_sample = fit_table(report, keys, settings, best)
        row["signals"][label] = {
            "fit_on_" + fit_split: report.run(keys, table, best).tokens_per_s,
            "in_sample": report.run(keys, in_sample, best).tokens_per_s,
            "table": {
                " ".join(map(str, state)): label_of(setting) for state, setting in sorted(table.items())
            },
        }
    return row, pair
