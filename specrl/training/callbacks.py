"""SB3 callbacks of a training run: ``specdec/`` scalars and histograms, checkpoint selection on
validation, a penalty for leaving the warm start's clone, a function every N steps, a progress
bar; and the run's hyperparameters for TensorBoard's HParams tab."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from stable_baselines3.common.callbacks import BaseCallback, ConvertCallback, EveryNTimesteps
from stable_baselines3.common.logger import HParam, Logger, TensorBoardOutputFormat
from tqdm.auto import tqdm

from specrl.envs.rollout import EPISODE_SUMMARY, EpisodeSummary

#: The scalars TensorBoard's HParams tab compares runs by (each run's last value of each).
HPARAM_METRICS = (
    "specdec/worst_ratio_vs_best_rule",
    "specdec/ratio_vs_tcp",
    "specdec/tokens_per_s",
    "specdec/acceptance_rate",
    "specdec/mean_acceptance_length",
    "rollout/ep_rew_mean",
)
#: What ``specdec/`` logs of the training episodes (each an :class:`EpisodeSummary` property).
SCALARS = (
    "tokens_per_s",
    "acceptance_rate",
    "mean_acceptance_length",
    "tokens_per_step",
    "mean_k",
    "mean_tau",
)


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
            for name in SCALARS:
                self.logger.record(f"specdec/{name}", getattr(total, name))
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
    """Checkpoint selection, run by :func:`every`: ``evaluate()`` (the deterministic policy against
    every rule on validation traces: :class:`specrl.training.selection.PolicyVsRules`), then
    ``save_best()`` when its worst ratio to the best rule is the best so far, kept with its step
    count in ``state["best"]``."""

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


class KLToClone(BaseCallback):
    """Keeps PPO near the warm start's clone, as RLHF's PPO keeps a model near its reference:
    after each rollout, every step's (normalised) reward loses ``coef`` times the log-ratio of the
    action taken, ``log pi(a|s) - log clone(a|s)`` (whose expectation is the KL divergence; the
    action's own, so that the penalty blames that action), and the advantages and returns are
    computed again. Logs ``specdec/kl_to_clone`` (the mean divergence, nats) and
    ``specdec/kl_penalty_share`` (mean absolute penalty over mean absolute reward)."""

    def __init__(self, clone: Any, coef: float) -> None:
        super().__init__()
        if coef <= 0:
            raise ValueError(f"kl_to_clone must be positive (0 trains without the penalty), got {coef}")
        self.clone, self.coef = clone, coef
        self.clone.set_training_mode(False)

    def _on_step(self) -> bool:
        return True

    def distributions(self, observations: np.ndarray) -> tuple[Any, Any]:
        """The policy's and the clone's action distributions in ``observations`` (as the policy
        sees them)."""
        states = torch.as_tensor(observations, device=self.model.device)
        return self.model.policy.get_distribution(states), self.clone.get_distribution(states)

    def divergence(self, observations: np.ndarray) -> np.ndarray:
        """KL(policy || clone) in each state of ``observations``."""
        with torch.no_grad():
            policy, clone = (d.distribution for d in self.distributions(observations))
            pairs = zip(policy, clone, strict=True) if isinstance(policy, list) else [(policy, clone)]
            total = sum(torch.distributions.kl_divergence(p, q) for p, q in pairs)
        return total.cpu().numpy()

    def clone_log_prob(self, observations: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """log clone(a|s) of each (state, action) pair."""
        with torch.no_grad():
            _, clone = self.distributions(observations)
            return clone.log_prob(torch.as_tensor(actions, device=self.model.device)).cpu().numpy()

    def _on_rollout_end(self) -> None:
        buffer = self.model.rollout_buffer
        steps, envs = buffer.rewards.shape
        observations = buffer.observations.reshape(steps * envs, -1)
        actions = buffer.actions.reshape(steps * envs, -1)
        log_ratio = buffer.log_probs - self.clone_log_prob(observations, actions).reshape(steps, envs)
        penalty = (self.coef * log_ratio).astype(buffer.rewards.dtype)
        scale = float(np.abs(buffer.rewards).mean())
        buffer.rewards -= penalty
        buffer.compute_returns_and_advantage(last_values=self.locals["values"], dones=self.locals["dones"])
        self.logger.record("specdec/kl_to_clone", float(self.divergence(observations).mean()))
        self.logger.record("specdec/kl_penalty_share", float(np.abs(penalty).mean()) / max(scale, 1e-12))


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


def hparam_values(settings: dict[str, Any]) -> dict[str, bool | int | float | str]:
    """``settings`` as the HParams tab takes them: numbers, booleans and strings as they are,
    anything else (lists, dicts, None) as its JSON text."""
    plain = (bool, int, float, str)
    return {
        key: value if isinstance(value, plain) else json.dumps(value, default=str)
        for key, value in settings.items()
    }


def log_hparams(logger: Logger, settings: dict[str, Any]) -> None:
    """Records the run's ``settings`` as SB3's :class:`HParam` (TensorBoard only), with
    :data:`HPARAM_METRICS` as the scalars to compare runs by; the logger's next ``dump`` writes it."""
    metrics = dict.fromkeys(HPARAM_METRICS, 0.0)  # placeholders: the tab reads the logged scalars
    hparams = HParam(hparam_values(settings), metrics)
    logger.record("hparams", hparams, exclude=("stdout", "log", "json", "csv"))
