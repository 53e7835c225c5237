"""``experiments/batch_real.py``'s roster and runs: batch-aware controllers serving a scenario's test
requests with continuous batching in the real loop (:func:`specrl.serving.serve_continuous`),
side by side with the batch simulator's figures for the same controllers.

The protocol, played by :func:`~specrl.evaluation.compare.compare`: no warm-up; repeat after
repeat every controller once, every other repeat in reverse order
(:func:`~specrl.evaluation.compare.alternating`), all controllers of a repeat on the repeat's
seed (:func:`~specrl.evaluation.compare.repeat_seed`). Ratios are paired: the median over repeats
of the ratio within a repeat.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path

from tqdm.auto import tqdm

from specrl.batch_control import with_cutoff
from specrl.controllers import (
    Controller,
    HFHeuristicController,
    LearnedController,
    StaticController,
    TCPController,
)
from specrl.controllers.batch_schedule import BatchScheduleController
from specrl.engine.sampling import SamplingConfig
from specrl.envs import Scenario
from specrl.envs.batch_replay import BatchReplayEnv
from specrl.evaluation.compare import (
    Trial,
    alternating,
    compare,
    paired_ratio,
    repeat_seed,
)
from specrl.evaluation.intervals import paired_ratio_interval
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.serving import ContinuousRun, scenario_requests, serve_continuous
from specrl.trace_evaluation import controller_throughput

#: The rows every roster has: each ratio is to one of them.
REFERENCES = ("plain", "schedule")


def policy_folders(items: Sequence[str]) -> dict[str, str]:
    """The policies to compare by row label: an item is a folder, or ``NAME=FOLDER``; its label is
    ``ppo`` for one folder given alone, else ``ppo:NAME``, the name given or the folder's own.

    Raises:
        ValueError: an item with an empty name or folder, or two items of the same name (they
            label the rows).
    """
    named = []
    for item in items:
        name, equals, folder = item.rpartition("=") if "=" in item else ("", "", item)
        name = name if equals else Path(folder).name
        if not name or not folder:
            raise ValueError(f"{item!r}: give a policy folder, or NAME=FOLDER")
        named.append((name, folder, bool(equals)))
    names = [name for name, _, _ in named]
    if len(set(names)) < len(names):
        raise ValueError(f"the policies' names label the rows, so they must differ (NAME=FOLDER): {names}")
    if len(named) == 1 and not named[0][2]:
        return {"ppo": named[0][1]}
    return {f"ppo:{name}": folder for name, folder, _ in named}


def policy_labels(items: Sequence[str]) -> list[str]:
    """The row labels of :func:`policy_folders`."""
    return list(policy_folders(items))


def row_names(statics: Sequence[int], folders: Sequence[str]) -> set[str]:
    """Every row a roster of these static k and policy folders can have (what ``--only`` may name)."""
    known = {*REFERENCES, "tcp", "hf-heuristic", *(f"static:{k}" for k in statics)}
    labels = policy_labels(folders) if folders else []
    if labels:
        known |= {"ppo", "ppo+cutoff", *labels, *(f"{label}+cutoff" for label in labels)}
    return known


def chosen_row(label: str, only: Sequence[str], roster: Mapping[str, Controller]) -> bool:
    """Whether ``--only`` picks ``label``: by name, or ``ppo`` / ``ppo+cutoff`` for every policy's
    (a policy with no cut-off, never slower than plain decoding, serves as it is: its own row)."""
    if label in {*REFERENCES, *only}:
        return True
    if label.startswith("ppo:") and ("ppo+cutoff" if label.endswith("+cutoff") else "ppo") in only:
        return True
    uncut = label.startswith("ppo") and not label.endswith("+cutoff") and f"{label}+cutoff" not in roster
    return uncut and ("ppo+cutoff" in only or f"{label}+cutoff" in only)


def controllers(
    schedule: dict[int, int],
    policies: Mapping[str, LearnedController],
    cutoffs: Mapping[str, int | None],
    statics: Sequence[int] = (),
    only: Sequence[str] | None = None,
) -> dict[str, Controller]:
    """The roster: plain, the schedule, the rules, static k, and each policy (label -> controller)
    with and, where it has a cut-off, without speculation above it."""
    chosen = {
        "plain": StaticController(0),
        "schedule": BatchScheduleController(schedule),
        "tcp": TCPController(),
        "hf-heuristic": HFHeuristicController(),
        **{f"static:{k}": StaticController(k) for k in statics},
    }
    for label, policy in policies.items():
        chosen = with_cutoff({**chosen, label: policy}, cutoffs[label], label)
    if only is not None:
        chosen = {label: c for label, c in chosen.items() if chosen_row(label, only, chosen)}
    return chosen


def scenario_row(
    scenario: Scenario,
    pair: ModelPair,
    latency: LatencyModel,
    roster: Mapping[str, Controller],
    repeats: int,
    episodes: int,
    requests: int | None = None,
    max_new_tokens: int | None = None,
) -> dict:
    """Every controller of ``roster`` serving ``scenario``'s test requests (``requests`` of them;
    default: an arrival scenario's own, a fixed batch 2 a row and at least 8), ``repeats`` times in
    the real loop; and in the simulator over ``episodes`` test episodes. The report's row."""
    spec = scenario.batch
    capacity = spec.max_size if spec.arrivals else spec.size
    count = requests or (spec.requests if spec.arrivals else max(8, 2 * spec.size))
    served = scenario_requests(scenario, pair, "test", seed=0, count=count, latency=latency)
    sampling = SamplingConfig(scenario.sampling.temperature)
    budget = max_new_tokens or scenario.max_new_tokens
    env = BatchReplayEnv(scenario, latency=latency, split="test", pair=pair, prepare=True)
    simulated = {label: controller_throughput(env, c, episodes) for label, c in roster.items()}
    players = {
        label: lambda stream, seed, c=controller: serve_continuous(
            pair, c, stream, capacity, budget, sampling, seed=seed, prices=latency.price_line
        )
        for label, controller in roster.items()
    }
    with tqdm(total=repeats * len(roster), desc=scenario.name) as bar:

        def advance(trial: Trial[ContinuousRun] | None) -> None:
            bar.update()

        trials = compare(players, [served], repeats, order=alternating, seed=repeat_seed, on_trial=advance)
    measured: dict[str, list[float]] = {label: [] for label in roster}
    outputs: dict[str, list[list[int]]] = {}
    traces: dict[str, dict] = {}
    for trial in trials:  # in run order: the first repeat's outputs, the last repeat's trace
        measured[trial.player].append(trial.record.tokens_per_s)
        outputs.setdefault(trial.player, trial.record.outputs)
        traces[trial.player] = {"batch_sizes": trial.record.batch_sizes, "ks": trial.record.ks}
    same = all(outputs[label] == outputs["plain"] for label in roster) if sampling.greedy else None
    return {
        "batch": {
            "capacity": capacity,
            "arrivals": spec.arrivals,
            "requests": len(served),
            "max_new_tokens": budget,
        },
        "repeats": repeats,
        "tokens_per_s": measured,
        "median_tokens_per_s": {label: statistics.median(v) for label, v in measured.items()},
        **_paired(measured, "schedule"),
        **_paired(measured, "plain"),
        "sim_tokens_per_s": simulated,
        "sim_ratio_vs_schedule": {label: v / simulated["schedule"] for label, v in simulated.items()},
        "outputs_equal_plain": same,
        "last_repeat": traces,
    }


def _paired(measured: Mapping[str, list[float]], reference: str) -> dict[str, dict]:
    """``ratio_vs_REFERENCE`` (paired, per controller), its 95% interval ``ratio_vs_REFERENCE_ci95``
    (``[low, high]``, None with one repeat) and the repeats behind it, ``ratio_vs_REFERENCE_n``."""
    base = measured[reference]
    intervals = {label: paired_ratio_interval(values, base) for label, values in measured.items()}
    return {
        f"ratio_vs_{reference}": {label: paired_ratio(values, base) for label, values in measured.items()},
        f"ratio_vs_{reference}_ci95": {label: interval.ci95() for label, interval in intervals.items()},
        f"ratio_vs_{reference}_n": {label: interval.n for label, interval in intervals.items()},
    }
