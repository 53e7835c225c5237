"""Run a controller through an env for one episode and summarise it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import gymnasium as gym

from specrl.controllers.base import Controller


@dataclass
class EpisodeSummary:
    """Totals of one episode, or of many added together (``add``). Seconds are the env's
    (wall-clock or modeled), decode only."""

    tokens: int = 0
    seconds: float = 0.0
    steps: int = 0
    proposed: int = 0
    accepted: int = 0
    k_sum: int = 0  # k asked for, summed over steps
    tau_sum: float = 0.0
    episode_return: float = 0.0
    domain: str = ""
    prompt_index: int = -1

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.proposed if self.proposed else 0.0

    @property
    def mean_k(self) -> float:
        return self.k_sum / self.steps if self.steps else 0.0

    @property
    def mean_tau(self) -> float:
        return self.tau_sum / self.steps if self.steps else 0.0

    @property
    def mean_accepted_length(self) -> float:
        """Tokens per iteration, the bonus/correction token included."""
        return self.tokens / self.steps if self.steps else 0.0

    def add(self, other: EpisodeSummary) -> None:
        """Accumulate another episode's totals (throughput over many is total / total)."""
        for name in (
            "tokens",
            "seconds",
            "steps",
            "proposed",
            "accepted",
            "k_sum",
            "tau_sum",
            "episode_return",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict[str, float]:
        return {
            **asdict(self),
            "tokens_per_s": self.tokens_per_s,
            "acceptance_rate": self.acceptance_rate,
            "mean_accepted_length": self.mean_accepted_length,
            "mean_k": self.mean_k,
            "mean_tau": self.mean_tau,
        }


def run_episode(
    env: gym.Env, controller: Controller, seed: int | None = None, options: dict[str, Any] | None = None
) -> EpisodeSummary:
    """Reset ``env``, then let ``controller`` act on its observations until the episode ends.

    The controller's ``act`` gets the observation vector and returns an Action (or an index
    pair of the action space); ``observe`` gets ``info["step_result"]``.
    """
    observation, info = env.reset(seed=seed, options=options)
    controller.reset()
    summary = EpisodeSummary(domain=info["domain"], prompt_index=info["prompt_index"])
    done = False
    while not done:
        observation, reward, terminated, truncated, info = env.step(controller.act(observation))
        controller.observe(info["step_result"])
        done = terminated or truncated
        summary.tokens += info["tokens"]
        summary.seconds += info["seconds"]
        summary.steps += 1
        summary.proposed += info["proposed"]
        summary.accepted += info["accepted"]
        summary.k_sum += info["k"]
        summary.tau_sum += info["tau"]
        summary.episode_return += reward
    return summary
