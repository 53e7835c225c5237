"""The simulator columns: controllers replayed on test traces, the clairvoyant oracle and the
best static (k, tau) in hindsight, all under the scenario's latency model (modeled time).

The trace-replay simulator (``specrl.envs.trace_replay``), the traces (``specrl.envs.recording``) and
the bounds (``specrl.oracle``) are separate modules, gathered here so that the harness takes
one object (or, with ``--no-sim``, the reason the columns are absent).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import specrl.envs.recording
import specrl.envs.trace_replay
import specrl.oracle
from specrl.controllers.base import Controller
from specrl.envs.scenario import Scenario
from specrl.evaluation.roster import Episode
from specrl.evaluation.runs import EpisodeRecord, StepRecorder, play
from specrl.latency import LatencyModel
from specrl.models import ModelPair


@dataclass
class Simulator:
    """The simulator modules."""

    recording: ModuleType
    trace_replay: ModuleType
    oracle: ModuleType


def load_simulator() -> Simulator:
    """The simulator modules."""
    return Simulator(specrl.envs.recording, specrl.envs.trace_replay, specrl.oracle)


class SimulatorRun:
    """One scenario in the simulator: its traces of the scenario's prompt split (the harness
    sets ``test``), replayed under the latency model.

    The traces are the first ``prompts_per_domain`` prompts of each start domain in that split,
    trace i recorded with reset seed ``seed + i`` (collected and cached on first use), so the
    real-loop episodes of :func:`specrl.evaluation.roster.episode_plan` are among them.
    """

    def __init__(
        self,
        simulator: Simulator,
        scenario: Scenario,
        pair: ModelPair,
        latency: LatencyModel,
        prompts_per_domain: int,
        seed: int,
        progress: bool = True,
    ) -> None:
        self.simulator, self.scenario, self.seed = simulator, scenario, seed
        self.latency = latency.for_sampling(scenario.sampling)  # the oracle prices steps with it
        split = scenario.prompts.split
        self.traces = simulator.recording.cached_traces(
            scenario, split, pair, prompts_per_domain=prompts_per_domain, seed=seed, progress=progress
        )
        self.env = simulator.trace_replay.TraceReplayEnv(
            scenario, split=split, pair=pair, traces=self.traces, latency=latency
        )
        self.recorder = StepRecorder(self.env)
        indices = self.traces.arrays["trace_prompt_index"]
        self.episodes = [
            Episode(domain, int(index), seed + i)
            for i, (domain, index) in enumerate(zip(self.traces.domains, indices, strict=True))
        ]

    def play(self, controller: Controller) -> list[EpisodeRecord]:
        """``controller`` on every trace (trace i reset with the seed it was recorded with)."""
        return [
            play(self.recorder, controller, episode, options={"trace_index": i})
            for i, episode in enumerate(self.episodes)
        ]

    def bounds(self) -> dict[str, Any]:
        """The clairvoyant oracle over all traces, and the static grid with its best setting.

        Both use one acceptance realisation per trace, drawn with seed ``seed + i`` for trace i:
        the draws :meth:`play` resets trace i with (``TraceReplayEnv`` draws them first thing after
        ``reset(seed=...)``), so with sampling every controller and both bounds see the same
        outcomes, and the oracle bounds each controller trace by trace.
        """
        oracle, scenario = self.simulator.oracle, self.scenario
        window = int(self.traces.meta["context_window"])
        total = oracle.Bound(0, 0.0)
        for i, trace in enumerate(self.traces.traces):
            accepts = oracle.realisations(trace, 1, self.seed + i, scenario.drafters)[0]
            total += oracle.clairvoyant(
                trace, accepts, self.latency, scenario.k_max, window, scenario.drafters
            )
        tau_grid = tuple(scenario.tau_grid)
        best = oracle.best_static(
            self.traces, self.latency, tau_grid, count=1, seed=self.seed, drafters=scenario.drafters
        )
        setting = {"k": int(best.k), "tau": float(best.tau), "tokens_per_s": float(best.tokens_per_s)}
        pool = len(scenario.drafters) > 1  # a drafter is named where there was a choice
        return {
            "oracle": {"tokens": total.tokens, "seconds": total.seconds, "tokens_per_s": total.tokens_per_s},
            "best_static": setting | ({"drafter": best.drafter} if pool else {}),
            "static_grid": [
                {"k": int(k), "tau": float(tau), "tokens_per_s": float(value)}
                | ({"drafter": d} if pool else {})
                for (k, tau, d), value in sorted(best.table.items())
            ],
        }
