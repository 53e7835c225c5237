"""What the text's own signals can buy a drafter-pool controller, in the simulator.

The clairvoyant oracle over the drafter pool runs 1.3-1.6x the best single drafter (the n-gram
lookup at k = 7 on the default pair), but it knows how much of each proposal the target will
accept. This script asks how much of that room a controller can take from signals it can compute
from the text alone, before each step:

- ``order``: the length (3, 2, 1; 0 without a match) of the longest tail of the text that occurred
  earlier, the n-gram the lookup proposes from;
- ``run``: over how many of the latest positions (capped at 4) the lookup's first token was the one
  the target then emitted (the text is copying a passage);
- ``short``: the lookup can propose fewer than k_max tokens (its match ends just before the tail).

For each set of signals it fits a table policy: one action (k, drafter; tau = 0) per signal value,
the one that maximises throughput over every position of the fit split's traces, found by
Dinkelbach's iteration (choose argmax tokens - rho * seconds per value, set rho to the policy's
throughput, repeat). It scores that table on the report split, against the best static setting
and the clairvoyant oracle on the same traces and acceptance draws, and also fits it on the report
split itself: that in-sample figure is optimistic, a table that sees the traces it is scored on
(Dinkelbach's iteration over one-step sums is not an exact optimum, so it is a yardstick, not a
proof).

    python experiments/pool_signals.py                          # results/pool/signals.{json,md}
    python experiments/pool_signals.py --scenarios code_pool --out /tmp/signals   # one scenario
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from specrl.engine.drafters.ngram import NGramIndex
from specrl.envs import cached_traces, load_scenario
from specrl.envs.scenario import Scenario
from specrl.evaluation.machine import command_line, describe_commit, describe_machine, machine_info
from specrl.io import write_text_atomic
from specrl.latency import LatencyModel, calibrated
from specrl.models import ModelPair
from specrl.oracle import (
    Bound,
    best_static,
    clairvoyant_bound,
    priced,
    priced_step,
    realisations,
    static_settings,
)
from specrl.tables import markdown_table
from specrl.traces import TraceSet

DEFAULT_SCENARIOS = ["mixed_pool", "code_pool", "prose_pool", "math_pool"]
SIGNAL_SETS = {
    "order": ("order",),
    "order + run": ("order", "run"),
    "order + run + short": ("order", "run", "short"),
}
RUN_CAP = 4
ITERATIONS = 8
SEED = 0  # the acceptance draws' seed, as the oracle's bounds use


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", default=DEFAULT_SCENARIOS, help="pool scenarios")
    parser.add_argument("--fit-split", default="validation", help="the split the tables are fit on")
    parser.add_argument("--split", default="test", help="the split they are scored on")
    parser.add_argument("--count", type=int, default=4, help="acceptance draws per sampled trace")
    parser.add_argument("--out", default="results/pool/signals", help="output stem (.json and .md)")
    return parser.parse_args()


def text_signals(traces: TraceSet, scenario: Scenario, pair: ModelPair) -> list[list[dict[str, int]]]:
    """Per trace and generated position, the signals a step starting there can see."""
    prompts = scenario.with_overrides(split=traces.meta["split"]).prompt_sets(pair)
    k_max = traces.k_max
    signals = []
    for trace in traces.traces:
        if len(trace.segments) != 1:
            raise SystemExit(f"error: {traces.source} has domain shifts; this analysis takes one segment")
        segment = trace.segments[0]
        prompt = pair.encode(prompts[trace.domain][trace.prompt_index])
        if len(prompt) != segment.prompt_length:
            raise SystemExit(
                f"error: the prompt of {trace.domain}/{trace.prompt_index} has {len(prompt)} tokens, the "
                f"trace {segment.prompt_length}: the traces are not of this pair's prompts; recollect them"
            )
        text = torch.tensor(prompt + segment.tokens)
        lookup, fields = NGramIndex(), segment.fields("ngram")
        rows, run = [], 0
        for j in range(segment.end):
            match = lookup.longest_match(text[: segment.prompt_length + j])
            order, available = (0, 0) if match is None else (match[0], segment.prompt_length + j - match[1])
            if available != fields.available[j]:
                raise SystemExit(f"error: the lookup disagrees with the trace's at position {j}; recollect")
            if j:
                run = min(RUN_CAP, run + 1) if fields.match[j - 1] else 0
            rows.append({"order": order, "run": run, "short": int(0 < available < k_max)})
        signals.append(rows)
    return signals


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


def analyse(name: str, args: argparse.Namespace) -> tuple[dict, ModelPair]:
    scenario = load_scenario(name).with_overrides(time="modeled")
    pair = scenario.pair.load()
    latency = calibrated(pair, k_max=scenario.k_max, drafters=scenario.drafters)
    fit = Split(cached_traces(scenario, args.fit_split, pair), scenario, pair, latency, args.count)
    report = Split(cached_traces(scenario, args.split, pair), scenario, pair, latency, args.count)
    static = best_static(
        report.traces, latency, scenario.tau_grid, count=args.count, seed=SEED, drafters=scenario.drafters
    )
    best = (static.k, static.tau, static.drafter)
    oracle = clairvoyant_bound(
        report.traces, latency, count=args.count, seed=SEED, drafters=scenario.drafters
    )
    settings = static_settings(scenario.k_max, [0.0], scenario.drafters)
    row = {
        "traces": {args.fit_split: len(fit.traces.traces), args.split: len(report.traces.traces)},
        "best_static": {"k": static.k, "drafter": static.drafter, "tokens_per_s": static.tokens_per_s},
        "clairvoyant": oracle.tokens_per_s,
        "signals": {},
    }
    for label, keys in SIGNAL_SETS.items():
        table = fit_table(fit, keys, settings, best)
        in_sample = fit_table(report, keys, settings, best)
        row["signals"][label] = {
            "fit_on_" + args.fit_split: report.run(keys, table, best).tokens_per_s,
            "in_sample": report.run(keys, in_sample, best).tokens_per_s,
            "table": {
                " ".join(map(str, state)): label_of(setting) for state, setting in sorted(table.items())
            },
        }
    return row, pair


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    rows, machine = {}, None
    for name in tqdm(args.scenarios, desc="scenarios"):
        rows[name], pair = analyse(name, args)
        machine = machine or machine_info(pair)
    results = {
        "rows": rows,
        "fit_split": args.fit_split,
        "split": args.split,
        "count": args.count,
        "machine": machine,
        "command": command_line(),
        "seconds": round(time.perf_counter() - started),
    }
    write_text_atomic(Path(args.out).with_suffix(".json"), json.dumps(results, indent=2))
    text = render(results)
    write_text_atomic(Path(args.out).with_suffix(".md"), text)
    print(text)


def render(results: dict) -> str:
    fit, split = results["fit_split"], results["split"]
    lines = [
        f"# What the text's signals buy a pool controller ({split} traces, simulator)",
        "",
        f"Throughput over the best static setting on the {split} split, modeled time (the calibrated "
        f"latency model of this machine). A table policy picks (k, drafter) per signal value; "
        f"'fit on {fit}' is fit on the {fit} split and scored on {split}, 'in-sample' is fit on {split} "
        "itself (optimistic: the table sees the traces it is scored on). The script's docstring "
        "defines the signals.",
        "",
    ]
    header = ["scenario", "best static", "clairvoyant"]
    for label in SIGNAL_SETS:
        header += [f"{label}: fit on {fit}", f"{label}: in-sample"]
    rows = []
    for name, row in results["rows"].items():
        base = row["best_static"]["tokens_per_s"]
        cells = [
            name,
            f"{base:.1f} tok/s ({row['best_static']['drafter']} k={row['best_static']['k']})",
            f"{row['clairvoyant'] / base:.3f}",
        ]
        for label in SIGNAL_SETS:
            signal = row["signals"][label]
            cells += [f"{signal['fit_on_' + fit] / base:.3f}", f"{signal['in_sample'] / base:.3f}"]
        rows.append(cells)
    lines += [markdown_table(header, rows), ""]
    first = next(iter(results["rows"]))
    table = results["rows"][first]["signals"][list(SIGNAL_SETS)[-1]]["table"]
    lines += [
        f"The table fit on {fit} for {first} (signal values `order run short` -> action):",
        "",
        markdown_table(["order run short", "action"], list(table.items())),
        "",
        f"Command: `{results['command']}` ({results['seconds']} s). "
        f"Machine: {describe_machine(results['machine'])}; {describe_commit(results['machine']) or ''}",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
