"""``specrl/BatchReplay-v0``: the replay env (:class:`~specrl.envs.trace_replay.TraceReplayEnv`) on a
batch of requests, the batch simulator.

Every row of the batch replays its own trace with the same step definition as a single sequence,
every row takes the same action, and a step costs the batch's time under the latency model over
batch sizes (:class:`~specrl.latency.LatencyModel`, kind "batch") at the width of the batch's cache
grid (:class:`~specrl.engine.grid.SlotGrid`, the engine's own rules on counts); admitting requests
costs their prefill. The scenario's ``batch:`` section says how the batch fills
(:class:`~specrl.envs.scenario.BatchSpec`): a fixed size whose finished rows are replaced at once,
or requests arriving at a piecewise-constant Poisson rate in modeled time, so the batch grows and
shrinks with the load (continuous batching). Idle time, waiting for the next request with an empty
batch, is not a step and is not counted. An episode emits a fixed number of tokens (its requests'
traces), so its return orders policies as their busy time does, whatever rho is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specrl.envs.scenario import Scenario
from specrl.envs.trace_replay import TraceReplayEnv


class BatchReplayEnv(TraceReplayEnv):
    """The replay env whose default scenario is a batch (``batch_16``); everything else, spaces,
    reward, episode and arguments, is :class:`TraceReplayEnv`'s."""

    def __init__(self, scenario: str | Path | Scenario = "batch_16", **kwargs: Any) -> None:
        super().__init__(scenario, **kwargs)
