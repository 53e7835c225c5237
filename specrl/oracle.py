"""The clairvoyant oracles: the two bounds every comparison on traces carries (modeled time), and
the batch simulator's oracle, a bound and the labels the batch policy imitates.

- **Clairvoyant optimum** (:func:`clairvoyant`): knowing every acceptance outcome, the least
  modeled time to emit a trace, by dynamic programming over positions, T(j) = min_{k, d}
  [seconds of the step at j + T(j + tokens it emits)]. Only tau = 0 is searched: a cut after i
  proposals gives k = i's outcome for one more draft forward. Its tokens/sec is an upper bound.
- **Best static (k, tau, drafter) in hindsight** (:func:`best_static`): the grid's setting of
  the highest throughput (total tokens / total seconds) over all traces.

With sampling both bounds use the same seeded ``realisations`` per trace, the draws a controller
is compared on.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import DEFAULT_DRAFTER, Action, Outcome, throughput
from specrl.envs.batch_replay import BatchReplayEnv
from specrl.envs.replay import replay_step
from specrl.envs.trace_replay import realise_acceptance
from specrl.latency import LatencyModel
from specrl.trace_evaluation import controller_throughput, rates_by_batch
from specrl.traces import Segment, Trace, TraceSet


@dataclass(frozen=True)
class Bound:
    """Tokens emitted and modeled seconds spent."""

    tokens: int
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return throughput(self.tokens, self.seconds)

    def __add__(self, other: Bound) -> Bound:
        return Bound(self.tokens + other.tokens, self.seconds + other.seconds)


Setting = tuple[int, float, str]  # (k, tau, drafter)
Accepts = list[dict[str, list[bool]]]  # per segment, per drafter, per position


@dataclass(frozen=True)
class StaticBound:
    """The best static setting and the throughput of every (k, tau, drafter) setting."""

    k: int
    tau: float
    tokens_per_s: float
    table: dict[Setting, float] = field(default_factory=dict)
    drafter: str = DEFAULT_DRAFTER


def realisations(
    trace: Trace, count: int, seed: int, drafters: tuple[str, ...] = (DEFAULT_DRAFTER,)
) -> list[Accepts]:
    """``count`` acceptance realisations of ``trace`` for each of ``drafters``, drawn as
    :class:`~specrl.envs.TraceReplayEnv` draws them after ``reset(seed=seed)``. Greedy traces
    have one: the outcome is deterministic."""
    greedy = all(p in (0.0, 1.0) for s in trace.segments for p in s.accept_prob)
    rng = np.random.default_rng(seed)
    return [realise_acceptance(trace, rng, drafters) for _ in range(1 if greedy else count)]


def priced_step(
    segment: Segment, accepts: dict[str, list[bool]], latency: LatencyModel, position: int,
    k: int, tau: float, drafter: str, context_window: int, rows: int = 1,
) -> tuple[Outcome, float]:  # fmt: skip
    """The step at ``position`` replayed with (k, tau, drafter), and its modeled seconds: its share
    of a batch of ``rows`` rows stepping alike (``batch.share``; 1: a single sequence)."""
    step = replay_step(segment, position, k, tau, accepts.get(drafter, ()), context_window, None, drafter)
    verified = rows * (step.proposed + 1) if latency.packed else None
    draft, verify = latency.step_seconds(
        segment.prompt_length + position, len(step.confidences), step.proposed, drafter, rows, verified
    )
    return step, (draft + verify) / rows


def clairvoyant(
    trace: Trace,
    accepts: Accepts,
    latency: LatencyModel,
    k_max: int,
    context_window: int,
    drafters: tuple[str, ...] = (DEFAULT_DRAFTER,),
    rows: int = 1,
) -> Bound:
    """The minimum modeled time to emit ``trace`` given its acceptance outcomes ``accepts``,
    choosing k and the drafter each step (``rows``: :func:`priced_step`'s)."""
    total = Bound(0, 0.0)
    for segment, segment_accepts in zip(trace.segments, accepts, strict=True):
        best = [0.0] * (segment.end + 1)  # best[j]: fastest way to finish from position j
        for j in range(segment.end - 1, -1, -1):
            options = []
            for drafter in drafters:
                for k in range(k_max + 1):
                    step, seconds = priced_step(
                        segment, segment_accepts, latency, j, k, 0.0, drafter, context_window, rows
                    )
                    options.append(seconds + best[j + step.emitted])
                    if step.k < k:  # clipped by the room left: larger k are the same step
                        break
            best[j] = min(options)
        total += Bound(segment.end, best[0])
    return total


def static_run(
    trace: Trace,
    accepts: Accepts,
    latency: LatencyModel,
    k: int,
    tau: float,
    context_window: int,
    drafter: str = DEFAULT_DRAFTER,
    rows: int = 1,
) -> Bound:
    """Tokens and modeled seconds of ``trace`` decoded with the same (k, tau, drafter) every step
    (``rows``: :func:`priced_step`'s)."""
    total = Bound(0, 0.0)
    for segment, segment_accepts in zip(trace.segments, accepts, strict=True):
        position, seconds = 0, 0.0
        while position < segment.end:
            step, step_seconds = priced_step(
                segment, segment_accepts, latency, position, k, tau, drafter, context_window, rows
            )
            seconds += step_seconds
            position += step.emitted
        total += Bound(segment.end, seconds)
    return total


def priced(latency: LatencyModel, traces: TraceSet) -> LatencyModel:
    """The view of ``latency`` for the traces' sampling (greedy and sampled steps cost differently)."""
    return latency.for_sampling(SamplingConfig(temperature=float(traces.meta["sampling"]["temperature"])))


def clairvoyant_bound(
    traces: TraceSet,
    latency: LatencyModel,
    *,
    count: int = 4,
    seed: int = 0,
    drafters: tuple[str, ...] = (DEFAULT_DRAFTER,),
    rows: int = 1,
) -> Bound:
    """The clairvoyant optimum summed over every trace and realisation (priced for the traces'
    sampling; ``rows``: :func:`priced_step`'s)."""
    window = int(traces.meta["context_window"])
    latency = priced(latency, traces)
    total = Bound(0, 0.0)
    for index, trace in enumerate(traces.traces):
        for accepts in realisations(trace, count, seed + index, drafters):
            total += clairvoyant(trace, accepts, latency, traces.k_max, window, drafters, rows)
    return total


def static_settings(
    k_max: int, tau_grid: Sequence[float], drafters: tuple[str, ...] = (DEFAULT_DRAFTER,)
) -> list[Setting]:
    """Every static (k, tau, drafter): k in 0..k_max, tau on the grid, each drafter; k = 0 once
    (neither tau nor the drafter does anything without drafting; it is listed as the first drafter's)."""
    return [
        (k, float(tau), drafter)
        for drafter, k, tau in itertools.product(drafters, range(k_max + 1), tau_grid)
        if k or (tau == tau_grid[0] and drafter == drafters[0])
    ]


def best_static(
    traces: TraceSet,
    latency: LatencyModel,
    tau_grid: Sequence[float],
    *,
    count: int = 4,
    seed: int = 0,
    drafters: tuple[str, ...] = (DEFAULT_DRAFTER,),
    rows: int = 1,
) -> StaticBound:
    """Every static (k, tau, drafter), k in 0..k_max, tau on the grid and each of ``drafters``,
    over every trace and realisation (priced for the traces' sampling; ``rows``:
    :func:`priced_step`'s)."""
    window = int(traces.meta["context_window"])
    latency = priced(latency, traces)
    totals = dict.fromkeys(static_settings(traces.k_max, tau_grid, drafters), Bound(0, 0.0))
    for index, trace in enumerate(traces.traces):
        for accepts in realisations(trace, count, seed + index, drafters):
            for k, tau, drafter in totals:
                totals[(k, tau, drafter)] += static_run(
                    trace, accepts, latency, k, tau, window, drafter, rows
                )
    table = {setting: total.tokens_per_s for setting, total in totals.items()}
    (k, tau, drafter), best = max(table.items(), key=lambda item: item[1])
    return StaticBound(k=k, tau=tau, tokens_per_s=best, table=table, drafter=drafter)


# ---- the batch simulator ----------------------------------------------------------------------


class RolloutOracle:
    """Labels a step in the batch simulator by what each (k, tau) gains: tokens - lam[B] * seconds,
    B the batch's size now and lam[B] a throughput there (:func:`rates_by_batch`). With
    ``horizon`` 1 the gain is the next step's, known in advance (``env.preview``; the one-step
    oracle). Past one step, each action is taken on a fork of the episode (``env.fork``) and
    ``continuation`` (acting on the observation alone: a static k, a schedule, a policy) plays up
    to ``horizon - 1`` more steps, prefill counted: the labels of one step of policy iteration
    over the continuation (AggreVaTe). Under load a step's cost comes later: a step that
    speculates leaves its rows at different lengths, with holes in the grid and admissions one at
    a time (``results/batch/labels.md``), which only the rollout sees."""

    def __init__(
        self, env: BatchReplayEnv, lam: dict[int, float], continuation: Any = None, horizon: int = 1
    ) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be at least 1 step, got {horizon}")
        self.env, self.lam, self.continuation, self.horizon = env, lam, continuation, horizon

    def reset(self) -> None:
        pass

    def regrets(self, taus: tuple[float, ...] = (0.0,)) -> np.ndarray:
        """For every (k, tau): how much less than the best action it gains, in plain steps' worth
        (lam[B] times a plain step's seconds now). A tau never helps the oracle, which knows the
        outcomes, but its regret is what a controller that sees only the past pays or saves."""
        lam = self.lam.get(len(self.env.active), self.lam[0])  # lam[B], else over all sizes
        ks = range(self.env.scenario.k_max + 1)
        gains = np.array([[self._gain(Action(k, tau), lam) for tau in taus] for k in ks])
        return (gains.max() - gains) / (lam * self.env.preview(0)[1])

    def _gain(self, action: Action, lam: float) -> float:
        if self.horizon == 1:
            tokens, seconds = self.env.preview(action.k, action.tau)
            return tokens - lam * seconds
        twin, gain = self.env.fork(), 0.0
        for _ in range(self.horizon):
            observation, _, done, _, info = twin.step(action)
            gain += info["tokens"] - lam * info["seconds"]
            if done:
                break
            action = self.continuation.act(observation)
        return gain

    def act(self, observation) -> Action:
        return Action(int(self.regrets()[:, 0].argmin()))

    def observe(self, result) -> None:
        pass


def oracle_rates(env: BatchReplayEnv, controller, episodes: int, rounds: int = 3) -> dict[int, float]:
    """The one-step oracle's lam[B]: tokens per second of the steps at each batch size (key 0: over
    all), starting at ``controller``'s and refined to the oracle's own ``rounds`` times
    (Dinkelbach's iteration, per batch size). Prefill is left out: an episode admits every request
    once whatever the steps do."""
    lam = rates_by_batch(env, controller, episodes, prefill=False)
    for _ in range(rounds):
        lam = {**lam, **rates_by_batch(env, RolloutOracle(env, lam), episodes, prefill=False)}
    return lam


def batch_clairvoyant(env: BatchReplayEnv, controller, episodes: int) -> float:
    """The one-step oracle's throughput (tokens over busy seconds), lam[B] refined from ``controller``'s."""
    return controller_throughput(env, RolloutOracle(env, oracle_rates(env, controller, episodes)), episodes)
