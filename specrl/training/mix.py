"""The envs PPO trains on, as one SB3 VecEnv: the scenario mix of trace replays (the default),
or the real loop on train prompts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from stable_baselines3.common.vec_env import VecEnv

from specrl.acceptance import AcceptancePredictor
from specrl.envs import Scenario
from specrl.envs.vec_real import real_loop_vec_env
from specrl.envs.vec_replay import SubEnvVecEnv, VecTraceReplay
from specrl.latency import LatencyModel
from specrl.traces import TraceSet


class ScenarioMix(SubEnvVecEnv):
    """Several :class:`VecTraceReplay` (one per scenario) stepped as one SB3 VecEnv; its
    sub-envs are the parts' rows, in order."""

    def __init__(self, parts: Sequence[VecTraceReplay]) -> None:
        self.parts = list(parts)
        self.envs = [env for part in self.parts for env in part.envs]
        self.bounds = np.cumsum([0] + [p.num_envs for p in self.parts])
        self.render_mode = None
        first = self.parts[0]
        super().__init__(int(self.bounds[-1]), first.observation_space, first.action_space)
        self._actions: np.ndarray | None = None

    def reset(self) -> np.ndarray:
        for index, part in enumerate(self.parts):
            if self._seeds[0] is not None:
                part.seed(self._seeds[0] + 1000 * index)
        self._reset_seeds()
        return np.concatenate([part.reset() for part in self.parts])

    def step_wait(self):
        results = [
            part.step(self._actions[lo:hi])
            for part, lo, hi in zip(self.parts, self.bounds[:-1], self.bounds[1:], strict=True)
        ]
        observations, rewards, dones, infos = zip(*results, strict=True)
        for part, part_infos in zip(self.parts, infos, strict=True):
            for info in part_infos:
                if info:
                    info["scenario"] = part.scenario.name
        return (
            np.concatenate(observations),
            np.concatenate(rewards),
            np.concatenate(dones),
            [info for part_infos in infos for info in part_infos],
        )


def envs_per_scenario(n_envs: int, scenarios: int) -> list[int]:
    """``n_envs`` envs split as evenly as possible (at least one per scenario)."""
    base, extra = divmod(max(n_envs, scenarios), scenarios)
    return [base + (i < extra) for i in range(scenarios)]


def training_envs(
    scenarios: Sequence[Scenario],
    n_envs: int,
    latency: LatencyModel,
    *,
    train: dict[str, TraceSet] | None,
    predictor: AcceptancePredictor | None,
    seed: int,
    subprocesses: bool = False,
) -> VecEnv:
    """``n_envs`` envs split over ``scenarios`` (:func:`envs_per_scenario`), seeded with ``seed``:
    replays of each scenario's ``train`` traces (a :class:`ScenarioMix`; part i seeded ``seed + i``),
    or, with ``train`` None, the real loop on train prompts with each scenario's time source (in
    processes with ``subprocesses``)."""
    counts = envs_per_scenario(n_envs, len(scenarios))
    if train is None:
        mix = real_loop_vec_env(scenarios, counts, latency, predictor=predictor, subprocesses=subprocesses)
    else:
        mix = ScenarioMix(
            [
                VecTraceReplay(s, train[s.name], latency, num_envs=n, seed=seed + i, predictor=predictor)
                for i, (s, n) in enumerate(zip(scenarios, counts, strict=True))
            ]
        )
    mix.seed(seed)
    return mix
