"""Pieces of PPO training on the trace-replay simulator: the scenario mix, evaluation on
traces (validation traces select checkpoints, test traces are reported: docs/design.md section 4b),
and the SB3 callbacks that log ``specdec/`` scalars and keep checkpoints.

``experiments/train_ppo.py`` reads top to bottom with these.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from stable_baselines3.common.callbacks import BaseCallback, ConvertCallback, EveryNTimesteps
from stable_baselines3.common.logger import TensorBoardOutputFormat

from specrl.acceptance import AcceptancePredictor
from specrl.controllers.base import Controller
from specrl.envs import EpisodeSummary, Scenario, TraceReplayEnv, run_episode
from specrl.envs.vec_replay import SubEnvVecEnv, VecTraceReplay
from specrl.io import write_text_atomic
from specrl.latency import LatencyModel
from specrl.provenance import git_commit
from specrl.tables import markdown_table
from specrl.traces import TraceSet

# ---- the scenario mix as one VecEnv -------------------------------------------------------


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


# ---- evaluation on validation or test traces ------------------------------------------------


def evaluate_controller(
    controller: Controller,
    scenario: Scenario,
    traces: TraceSet,
    latency: LatencyModel,
    repeats: int = 1,
    seed: int = 0,
) -> EpisodeSummary:
    """A controller over every trace (``repeats`` acceptance draws each, for sampling). Trace i of
    repeat r is reset with seed :func:`episode_seed`, as :func:`evaluate_policy` starts it: both
    see the same acceptance draws (common random numbers)."""
    env = TraceReplayEnv(scenario, traces=traces, latency=latency)
    result = EpisodeSummary()
    for repeat in range(1 if traces.greedy else repeats):
        for index in range(len(traces)):
            result.add(
                run_episode(
                    env, controller, seed=episode_seed(seed, repeat, index), options={"trace_index": index}
                )
            )
    return result


def episode_seed(seed: int, repeat: int, index: int) -> int:
    """The reset seed of trace ``index`` in ``repeat``: one definition for every evaluation."""
    return seed + 7919 * repeat + index


def evaluate_policy(
    predict: Callable[[np.ndarray], np.ndarray],
    scenario: Scenario,
    traces: TraceSet,
    latency: LatencyModel,
    repeats: int = 1,
    seed: int = 0,
    predictor: AcceptancePredictor | None = None,
) -> EpisodeSummary:
    """A batch policy (observations (N, 19) -> actions (N, 2), or (N, 3) with the per-token stop
    dimension, applied with ``predictor``) over every trace at once, on the acceptance draws
    :func:`evaluate_controller` uses for the same ``seed``."""
    result = EpisodeSummary()
    for repeat in range(1 if traces.greedy else repeats):
        env = VecTraceReplay(scenario, traces, latency, num_envs=len(traces), predictor=predictor)
        seeds = [episode_seed(seed, repeat, index) for index in range(len(traces))]
        observations = env.start_traces(range(len(traces)), seeds=seeds)
        live = np.ones(len(traces), dtype=bool)
        while live.any():
            observations, _, dones, infos = env.step(predict(observations))
            for row in np.flatnonzero(dones & live):
                info = infos[row]
                result.add(
                    EpisodeSummary(  # the episode's seconds come unsplit
                        new_tokens=info["episode_tokens"],
                        verify_seconds=info["episode_seconds"],
                        steps=info["steps"],
                        proposed=info["proposed"],
                        accepted=info["accepted"],
                        k_sum=info["k_sum"],
                        tau_sum=info["tau_sum"],
                        episode_return=info["episode_return"],
                    )
                )
            live &= ~dones
    return result


# ---- callbacks ------------------------------------------------------------------------------


def tensorboard_writer(logger: Any):
    """The SummaryWriter behind SB3's tensorboard output (for text and histograms)."""
    for output in logger.output_formats:
        if isinstance(output, TensorBoardOutputFormat):
            return output.writer
    return None


class SpecdecMetrics(BaseCallback):
    """Logs ``specdec/`` scalars of finished training episodes and histograms of k, tau and, with
    the per-token stop dimension, the stop threshold; with a drafter pool, the share of the
    sampled actions that chose each drafter (``specdec/drafter_share/<name>``)."""

    def __init__(
        self,
        tau_grid: Sequence[float],
        histogram_every: int = 20,
        stop_grid: Sequence[float] | None = None,
        drafters: Sequence[str] = ("draft",),
    ) -> None:
        super().__init__()
        self.tau_grid = np.asarray(tau_grid)
        self.stop_grid = None if stop_grid is None else np.asarray(stop_grid)
        self.drafters = tuple(drafters)
        self.histogram_every = histogram_every
        self.episodes: list[dict[str, Any]] = []
        self.actions: list[np.ndarray] = []
        self.rollouts = 0

    def _on_step(self) -> bool:
        self.episodes += [info for info in self.locals["infos"] if "k_sum" in info]  # episode ends
        if self.rollouts % self.histogram_every == 0:
            actions = np.asarray(self.locals["actions"])
            self.actions.append(actions.reshape(-1, actions.shape[-1]))
        return True

    def _on_rollout_end(self) -> None:
        self.rollouts += 1
        if self.episodes:
            total = {
                key: sum(e[key] for e in self.episodes)
                for key in (
                    "episode_tokens",
                    "episode_seconds",
                    "steps",
                    "proposed",
                    "accepted",
                    "k_sum",
                    "tau_sum",
                )
            }
            self.logger.record("specdec/tokens_per_s", total["episode_tokens"] / total["episode_seconds"])
            self.logger.record("specdec/acceptance_rate", total["accepted"] / max(1.0, total["proposed"]))
            self.logger.record("specdec/mean_accepted_len", total["episode_tokens"] / total["steps"])
            self.logger.record("specdec/k_mean", total["k_sum"] / total["steps"])
            self.logger.record("specdec/tau_mean", total["tau_sum"] / total["steps"])
            self.logger.record("specdec/episodes", len(self.episodes))
            self.episodes = []
        writer = tensorboard_writer(self.logger)
        if self.actions and writer is not None:
            actions = np.concatenate(self.actions)
            writer.add_histogram("specdec/k", actions[:, 0], self.num_timesteps)
            writer.add_histogram("specdec/tau", self.tau_grid[actions[:, 1]], self.num_timesteps)
            if self.stop_grid is not None and actions.shape[1] >= 3:
                writer.add_histogram("specdec/stop", self.stop_grid[actions[:, 2]], self.num_timesteps)
            if len(self.drafters) > 1:  # the last index picks the drafter: the share of each
                shares = np.bincount(actions[:, -1], minlength=len(self.drafters)) / len(actions)
                for name, share in zip(self.drafters, shares, strict=True):
                    writer.add_scalar(f"specdec/drafter_share/{name}", share, self.num_timesteps)
            self.actions = []


class ValidationEvaluation(BaseCallback):
    """Checkpoint selection, run by SB3's ``EveryNTimesteps`` (:func:`every`): ``evaluate()``
    (the deterministic policy on the validation traces of each scenario in the simulator, against
    TCP on the same traces; never test traces); ``save_best()`` when the ratio to TCP is the best
    so far."""

    def __init__(
        self,
        evaluate: Callable[[], dict[str, Any]],
        save_best: Callable[[], None],
        state: dict[str, Any],
    ) -> None:
        super().__init__()
        self.evaluate, self.save_best, self.state = evaluate, save_best, state

    def _on_step(self) -> bool:
        self.run()
        return True

    def run(self) -> float:
        report = self.evaluate()
        for name, value in report["scalars"].items():
            self.logger.record(f"specdec/eval/{name}", value)
        ratio = report["ratio_vs_tcp"]
        self.logger.record("specdec/ratio_vs_tcp", ratio)
        if ratio > self.state.get("best_ratio_vs_tcp", -np.inf):
            self.state.update(best_ratio_vs_tcp=ratio, best_timesteps=self.num_timesteps)
            self.save_best()
        self.logger.dump(self.num_timesteps)
        return ratio


def every(steps: int, callback: BaseCallback | Callable[[], None]) -> EveryNTimesteps:
    """``callback`` (a callback, or a function of no arguments) every ``steps`` env steps, by SB3's
    own counter."""
    if not isinstance(callback, BaseCallback):
        function = callback

        def call(_locals: dict[str, Any], _globals: dict[str, Any]) -> bool:
            function()
            return True

        callback = ConvertCallback(call)
    return EveryNTimesteps(steps, callback)


# ---- the run folder's record (rl-baselines3-zoo style) -------------------------------------

# a run folder (rl-zoo's layout): how it was made, and the best checkpoint with its observation statistics
RUN_RECORD, RUN_CONFIG = "run.json", "config.yaml"
BEST_MODEL, BEST_NORMALIZER = "best.zip", "best_vecnormalize.pkl"


def file_record(path: str | Path) -> dict[str, Any]:
    """A file by path and content: ``{"path", "sha256"}`` (sha256 None when it does not exist)."""
    path = Path(path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None
    return {"path": str(path), "sha256": digest}


def run_record(
    *,
    command: str,
    seed: int,
    arguments: dict[str, Any],
    hyperparameters: dict[str, Any],
    budget: dict[str, Any],
    scenarios: Sequence[Scenario],
    pair: str,
    latency_file: str | Path,
) -> dict[str, Any]:
    """Everything that made a training run: the git commit (:func:`specrl.provenance.git_commit`),
    the command and its parsed arguments, the seed, the PPO hyperparameters and the budget as
    resolved (the YAML with the command line's overrides), every scenario in full (defaults
    filled in) and the latency file used (path and sha256). JSON-ready; ``export_policy`` keeps it
    as the policy's provenance."""
    return {
        "git_commit": git_commit(),
        "command": command,
        "seed": seed,
        "arguments": {
            key: str(value) if isinstance(value, Path) else value for key, value in arguments.items()
        },
        "ppo": dict(hyperparameters),
        "train": dict(budget),
        "scenarios": {scenario.name: scenario.to_dict() for scenario in scenarios},
        "pair": pair,
        "latency_file": file_record(latency_file),
    }


def write_run_record(run_dir: Path, record: dict[str, Any]) -> None:
    """``run.json`` and the same as ``config.yaml`` in the run folder, each written atomically."""
    write_text_atomic(run_dir / RUN_RECORD, json.dumps(record, indent=2, default=str))
    plain = json.loads(json.dumps(record, default=str))  # tuples and paths as YAML's plain lists and strings
    write_text_atomic(run_dir / RUN_CONFIG, yaml.safe_dump(plain, sort_keys=False))


def save_state(path: Path, state: dict[str, Any]) -> None:
    write_text_atomic(path, json.dumps({**state, "saved": time.strftime("%Y-%m-%dT%H:%M:%S")}, indent=2))


# with the best static setting in hindsight, the rules a policy must beat: the bar it is measured against
# (not the evaluation roster, specrl.evaluation.roster.RULES)
BAR_RULES = ("tcp", "hf-heuristic", "adaedl", "specdec++", "pool-rule")  # the pool rule: pool scenarios only


def comparison_ratios(row: dict[str, float]) -> dict[str, float]:
    """PPO's ratios in one scenario's row of the test comparison (tokens/s per controller: "ppo",
    "tcp", the :data:`BAR_RULES`, "oracle" and one "best static (k=.., tau=..)" key, as
    ``experiments/train_ppo.py`` records them): to TCP, to the best static setting, to the best
    rule (the best of :data:`RULES` and that setting) and to the oracle."""
    static = next(value for name, value in row.items() if name.startswith("best static"))
    best_rule = max([static] + [row[name] for name in BAR_RULES if name in row])
    return {
        "tcp": row["ppo"] / row["tcp"],
        "best static": row["ppo"] / static,
        "best rule": row["ppo"] / best_rule,
        "oracle": row["ppo"] / row["oracle"],
    }


def hyperparameter_table(values: dict[str, Any]) -> str:
    """A markdown table of the run's settings, for TensorBoard's text tab."""
    return markdown_table(
        ["parameter", "value"],
        [[key, value if isinstance(value, str) else json.dumps(value)] for key, value in values.items()],
    )
