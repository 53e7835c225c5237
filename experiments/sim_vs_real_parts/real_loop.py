"""The controllers compared, and their real episodes: every step of a real-loop episode priced
twice, by the device clock and by the latency model, so that the two differ only in the price."""

from __future__ import annotations

from collections.abc import Callable

from specrl.controllers import Controller, HFHeuristicController, StaticController, TCPController
from specrl.engine.types import GenerationStats, StepResult
from specrl.envs import EpisodeSummary, SpecDecodeEnv
from specrl.evaluation.compare import compare
from specrl.traces import Trace, TraceSet

CONTROLLERS: dict[str, Callable[[], Controller]] = {
    "static k=1": lambda: StaticController(1),
    "static k=3": lambda: StaticController(3),
    "static k=5": lambda: StaticController(5),
    "static k=8": lambda: StaticController(8),
    "static k=6 tau=0.4": lambda: StaticController(6, 0.4),
    "tcp": TCPController,
    "tcp tau=0.25": TCPController.with_confidence_cut,
    "hf-heuristic": HFHeuristicController,
}
SPLIT = "test"


def subset(traces: TraceSet, count: int) -> TraceSet:
    """The first ``count`` traces of each domain."""
    keep, seen = [], {}
    for trace in traces.traces:
        seen[trace.domain] = seen.get(trace.domain, 0) + 1
        if seen[trace.domain] <= count:
            keep.append(trace)
    return TraceSet.from_traces(keep, traces.meta)


def add_step(totals: EpisodeSummary, result: StepResult, draft_seconds: float, verify_seconds: float) -> None:
    """One step of ``result``'s tokens, priced at the given draft and verify seconds."""
    totals.add(
        GenerationStats(
            result.emitted, 1, 0.0, draft_seconds, verify_seconds, result.proposed, result.accepted
        )
    )


def play_priced(
    env: SpecDecodeEnv, make: Callable[[], Controller], trace: Trace, seed: int
) -> tuple[EpisodeSummary, EpisodeSummary]:
    """A fresh controller on ``trace``'s prompt with reset seed ``seed``: the (modeled, wall-clock)
    totals of the same real steps, priced by ``env.latency`` and by the device clock."""
    controller = make()
    observation, _ = env.reset(
        seed=seed, options={"domain": trace.domain, "prompt_index": trace.prompt_index}
    )
    controller.reset()
    modeled, wallclock = EpisodeSummary(), EpisodeSummary()
    done = False
    while not done:
        observation, _, done, _, info = env.step(controller.act(observation))
        result = info["step_result"]
        controller.observe(result)
        add_step(modeled, result, *env.latency.seconds(result))
        add_step(wallclock, result, result.draft_seconds, result.verify_seconds)
    return modeled, wallclock


def run_real(
    env: SpecDecodeEnv, traces: TraceSet, repeats: int
) -> tuple[dict[str, tuple[EpisodeSummary, EpisodeSummary]], list[float]]:
    """label -> (modeled, wall-clock) totals of each controller over the traces' episodes, and
    every episode's modeled / wall-clock seconds in run order.

    The controllers take turns on each episode (same prompt, same seed: the trace's, + 100,000 per
    repeat), in a fixed order, after one untimed warm-up episode each on the first trace
    (:func:`~specrl.evaluation.compare.compare`), so slow phases of the machine hit them alike.
    ``env.latency`` (the scenario's sampling mode) prices the modeled column. The per-episode
    ratios measure the machine's own noise: the same model on the same steps.
    """
    trials = compare(
        {
            label: (lambda trace, seed, make=make: play_priced(env, make, trace, seed))
            for label, make in CONTROLLERS.items()
        },
        traces.traces,
        1 if traces.greedy else repeats,
        seed=lambda trace, repeat, index: trace.seed + 100_000 * repeat,
        warmup=1,
    )
    totals = {label: (EpisodeSummary(), EpisodeSummary()) for label in CONTROLLERS}
    for trial in trials:
        for total, episode in zip(totals[trial.player], trial.record, strict=True):
            total.add(episode)
    episode_ratios = [
        modeled.seconds / wallclock.seconds for modeled, wallclock in (t.record for t in trials)
    ]
    return totals, episode_ratios
