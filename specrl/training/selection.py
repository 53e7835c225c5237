"""Checkpoint selection in the simulator: the deterministic policy against TCP on the validation
traces of every training scenario (never test traces: docs/design.md section 4b)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecNormalize

from specrl.acceptance import AcceptancePredictor
from specrl.controllers import TCPController
from specrl.envs import EpisodeSummary, Scenario
from specrl.latency import LatencyModel
from specrl.trace_evaluation import evaluate_controller, evaluate_policy
from specrl.traces import TraceSet

#: observations (N, 19) -> actions (N, 2), or (N, 3) with the per-token stop dimension
Predict = Callable[[np.ndarray], np.ndarray]


def policy_predict(model: PPO, normalizer: VecNormalize | None) -> Predict:
    """The model's deterministic actions, through the training normalisation of the observations."""
    if normalizer is None:
        return lambda observations: model.predict(observations, deterministic=True)[0]
    return lambda observations: model.predict(normalizer.normalize_obs(observations), deterministic=True)[0]


def geometric_mean(values: Iterable[float]) -> float:
    """The geometric mean, the summary of ratios over scenarios."""
    return float(np.exp(np.mean(np.log(list(values)))))


class PolicyVsTCP:
    """A policy against TCP (the seed's heuristic, the reference of the ratio) on each scenario's
    ``traces``, every scenario on the same acceptance draws for both (:mod:`specrl.trace_evaluation`).
    TCP runs once, here; calling the object scores a policy."""

    def __init__(
        self,
        scenarios: Sequence[Scenario],
        traces: dict[str, TraceSet],
        latency: LatencyModel,
        repeats: int,
        predictor: AcceptancePredictor | None,
    ) -> None:
        self.scenarios, self.traces, self.latency = list(scenarios), traces, latency
        self.repeats, self.predictor = repeats, predictor
        self.tcp: dict[str, EpisodeSummary] = {
            s.name: evaluate_controller(TCPController(), s, traces[s.name], latency, repeats)
            for s in self.scenarios
        }

    def __call__(self, predict: Predict) -> dict[str, Any]:
        """``{"results": summary per scenario, "ratio_vs_tcp": the geometric mean over scenarios of
        the policy's tokens/s over TCP's, "scalars": <scenario>/tokens_per_s and
        <scenario>/ratio_vs_tcp}``."""
        results = {
            s.name: evaluate_policy(
                predict, s, self.traces[s.name], self.latency, self.repeats, predictor=self.predictor
            )
            for s in self.scenarios
        }
        ratios = {name: r.tokens_per_s / self.tcp[name].tokens_per_s for name, r in results.items()}
        scalars = {f"{name}/tokens_per_s": r.tokens_per_s for name, r in results.items()}
        scalars.update({f"{name}/ratio_vs_tcp": ratios[name] for name in ratios})
        return {"results": results, "ratio_vs_tcp": geometric_mean(ratios.values()), "scalars": scalars}
