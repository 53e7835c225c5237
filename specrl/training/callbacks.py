"""SB3 callbacks of a training run: ``specdec/`` scalars and histograms, checkpoint selection on
validation, a function every N steps, a progress bar; and the hyperparameter table of
TensorBoard's text tab."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.callbacks import BaseCallback, ConvertCallback, EveryNTimesteps
from stable_baselines3.common.logger import TensorBoardOutputFormat
from tqdm.auto import tqdm

from specrl.envs.rollout import EPISODE_SUMMARY, EpisodeSummary
from specrl.tables import markdown_table


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
        self.episodes: list[EpisodeSummary] = []
        self.actions: list[np.ndarray] = []
        self.rollouts = 0

    def _on_step(self) -> bool:
        self.episodes += [info[EPISODE_SUMMARY] for info in self.locals["infos"] if EPISODE_SUMMARY in info]
        if self.rollouts % self.histogram_every == 0:
            actions = np.asarray(self.locals["actions"])
            self.actions.append(actions.reshape(-1, actions.shape[-1]))
        return True

    def _on_rollout_end(self) -> None:
        self.rollouts += 1
        if self.episodes:
            total = EpisodeSummary()
            for summary in self.episodes:
                total.add(summary)
            self.logger.record("specdec/tokens_per_s", total.tokens_per_s)
            self.logger.record("specdec/acceptance_rate", total.acceptance_rate)
            self.logger.record("specdec/mean_accepted_len", total.mean_accepted_length)
            self.logger.record("specdec/k_mean", total.mean_k)
            self.logger.record("specdec/tau_mean", total.mean_tau)
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
    every rule on the same traces; never test traces:
    :class:`specrl.training.selection.PolicyVsRules`); ``save_best()`` when its worst ratio over
    the scenarios to the best rule is the best so far. ``state["best"]`` keeps the kept
    checkpoint's step count and scores."""

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
        worst = report["worst_ratio_vs_best_rule"]
        self.logger.record("specdec/ratio_vs_tcp", report["ratio_vs_tcp"])
        self.logger.record("specdec/worst_ratio_vs_best_rule", worst)
        if worst > self.state.get("best", {}).get("worst_ratio_vs_best_rule", -np.inf):
            self.state["best"] = {
                "timesteps": self.num_timesteps,
                "worst_ratio_vs_best_rule": worst,
                "ratio_vs_best_rule": report["ratio_vs_best_rule"],
                "ratio_vs_tcp": report["ratio_vs_tcp"],
            }
            self.save_best()
        self.logger.dump(self.num_timesteps)
        return worst


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


class Progress(BaseCallback):
    """A tqdm bar over env steps, from ``start`` (a resumed run's count) to ``total``."""

    def __init__(self, total: int, start: int) -> None:
        super().__init__()
        self.bar = tqdm(total=total, initial=start, unit="step", desc="PPO", smoothing=0.1)

    def _on_step(self) -> bool:
        self.bar.update(self.num_timesteps - self.bar.n)
        return True

    def _on_training_end(self) -> None:
        self.bar.close()


def hyperparameter_table(values: dict[str, Any]) -> str:
    """A markdown table of the run's settings, for TensorBoard's text tab."""
    return markdown_table(
        ["parameter", "value"],
        [[key, value if isinstance(value, str) else json.dumps(value)] for key, value in values.items()],
    )
