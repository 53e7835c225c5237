"""A table policy over text signals: one action (k, drafter; tau = 0) per signal value, fit to
maximise a split's throughput by Dinkelbach's iteration (choose argmax tokens - rho * seconds per
value, set rho to the policy's throughput, repeat), and scored on the same traces and acceptance
draws as the best static setting and the clairvoyant oracle."""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from specrl.envs.scenario import Scenario
from specrl.evaluation.pool_signals.signals import text_signals
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.oracle import Bound, priced, priced_step, realisations
from specrl.traces import TraceSet

ITERATIONS = 8
SEED = 0  # the acceptance draws' seed, as the oracle's bounds use


class Split:
    """One split's traces, their acceptance draws and signals, priced by one latency model."""

    def __init__(
        self, traces: TraceSet, scenario: Scenario, pair: ModelPair, latency: LatencyModel, count: int
    ):
        self.traces, self.drafters = traces, scenario.drafters
        self.latency, self.window = priced(latency, traces), int(traces.meta["context_window"])
        self.draws = [
            realisations(trace, count, SEED + i, scenario.drafters) for i, trace in enumerate(traces.traces)
        ]
        self.signals = text_signals(traces, scenario, pair)

    def step(self, trace: int, accepts, position: int, setting) -> tuple[int, float]:
        k, tau, drafter = setting
        segment = self.traces.traces[trace].segments[0]
        step, seconds = priced_step(segment, accepts[0], self.latency, position, k, tau, drafter, self.window)
        return step.emitted, seconds

    def one_step_sums(self, keys: tuple[str, ...], settings: list) -> dict[tuple, np.ndarray]:
        """Per signal value: tokens and seconds of every setting's step from every position."""
        sums: dict[tuple, np.ndarray] = defaultdict(lambda: np.zeros((len(settings), 2)))
        for i, trace in enumerate(self.traces.traces):
            for accepts in self.draws[i]:
                for j in range(trace.segments[0].end):
                    state = tuple(self.signals[i][j][key] for key in keys)
                    for a, setting in enumerate(settings):
                        sums[state][a] += self.step(i, accepts, j, setting)
        return sums

    def run(self, keys: tuple[str, ...], table: dict[tuple, tuple], fallback: tuple) -> Bound:
        """Every trace and draw decoded by the table policy (``fallback`` for unseen values)."""
        total = Bound(0, 0.0)
        for i, trace in enumerate(self.traces.traces):
            end = trace.segments[0].end
            for accepts in self.draws[i]:
                position, seconds = 0, 0.0
                while position < end:
                    state = tuple(self.signals[i][position][key] for key in keys)
                    emitted, step_seconds = self.step(i, accepts, position, table.get(state, fallback))
                    position, seconds = position + emitted, seconds + step_seconds
                total += Bound(end, seconds)
        return total


def fit_table(split: Split, keys: tuple[str, ...], settings: list, fallback: tuple) -> dict[tuple, tuple]:
    """Dinkelbach's iteration for the table that maximises ``split``'s throughput."""
    sums = split.one_step_sums(keys, settings)
    rho = split.run(keys, {}, fallback).tokens_per_s
    table: dict[tuple, tuple] = {}
    for _ in range(ITERATIONS):
        chosen = {state: settings[int(np.argmax(v[:, 0] - rho * v[:, 1]))] for state, v in sums.items()}
        if chosen == table:
            break
        table, rho = chosen, split.run(keys, chosen, fallback).tokens_per_s
    return table


def label_of(setting: tuple) -> str:
    k, _, drafter = setting
    return f"{drafter} k={k}" if k else "plain (k=0)"
