"""Run a controller through an env for one episode and summarise it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from specrl.controllers.base import Controller
from specrl.engine.types import GenerationStats

# The info key of an episode's last step that holds its EpisodeSummary, in the vectorised envs
# (VecTraceReplay's rows, the real loop's EpisodeTotals): what training's specdec/ scalars and the
# evaluations on traces add up.
EPISODE_SUMMARY = "episode_summary"


@dataclass
class EpisodeSummary(GenerationStats):
    """Totals of one env episode, or of many added together (``add``): the engine's
    :class:`GenerationStats` (so ``tokens_per_s``, ``acceptance_rate`` and
    ``mean_acceptance_length`` have one definition, vLLM's) with the env's seconds (wall-clock or modeled,
    decode only: ``prefill_seconds`` stays 0), plus what the controller asked for and the return.

    ``tokens`` is ``new_tokens``. Where a source reports an episode's seconds without the draft /
    verify split (the vectorised replay's episode info, HF ``generate``), they are kept whole in
    ``verify_seconds``; ``seconds`` is the total either way.
    """

    k_sum: int = 0  # k asked for, summed over steps
    tau_sum: float = 0.0
    episode_return: float = 0.0
    domain: str = ""
    prompt_index: int = -1

    @property
    def tokens(self) -> int:
        return self.new_tokens

    @tokens.setter
    def tokens(self, value: int) -> None:
        self.new_tokens = value

    @property
    def mean_k(self) -> float:
        return self.k_sum / self.steps if self.steps else 0.0

    @property
    def mean_tau(self) -> float:
        return self.tau_sum / self.steps if self.steps else 0.0

    def add(self, other: GenerationStats) -> None:
        """Accumulate another episode's totals (throughput over many is total / total)."""
        super().add(other)
        if isinstance(other, EpisodeSummary):
            self.k_sum += other.k_sum
            self.tau_sum += other.tau_sum
            self.episode_return += other.episode_return

    def add_step(self, info: dict[str, Any], reward: float = 0.0) -> None:
        """Accumulate one env step from its ``info`` (``tokens``, ``proposed``, ``accepted``,
        ``drafts``, ``k``, ``tau`` and ``step_result``, whose draft and verify seconds are the
        reward's)."""
        result = info["step_result"]
        self.new_tokens += info["tokens"]
        self.draft_seconds += result.draft_seconds
        self.verify_seconds += result.verify_seconds
        self.steps += 1
        self.num_draft_tokens += info["proposed"]
        self.num_accepted_tokens += info["accepted"]
        self.num_drafts += info["drafts"]
        self.k_sum += info["k"]
        self.tau_sum += info["tau"]
        self.episode_return += reward

    def to_dict(self) -> dict[str, float]:
        return {
            "tokens": self.tokens,
            "seconds": self.seconds,
            "steps": self.steps,
            "num_drafts": self.num_drafts,
            "num_draft_tokens": self.num_draft_tokens,
            "num_accepted_tokens": self.num_accepted_tokens,
            "k_sum": self.k_sum,
            "tau_sum": self.tau_sum,
            "episode_return": self.episode_return,
            "domain": self.domain,
            "prompt_index": self.prompt_index,
            "tokens_per_s": self.tokens_per_s,
            "acceptance_rate": self.acceptance_rate,
            "mean_acceptance_length": self.mean_acceptance_length,
            "tokens_per_step": self.tokens_per_step,
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
        summary.add_step(info, reward)
    return summary
