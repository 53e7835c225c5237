"""A trained policy as a controller: the exported TorchScript module picks (k, tau) every iteration,
and, for a policy with a stop dimension, the per-token stop rule the engine asks inside the draft loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from specrl.controllers.stop_rules import stop_rule_table
from specrl.engine.types import Action, StepResult
from specrl.export import ExportedPolicy, load_policy
from specrl.features import N_FEATURES


class LearnedController:
    """Acts with an exported PPO policy (``policies/<name>/``, see :mod:`specrl.export`).

    The policy maps the observation vector of :mod:`specrl.features` to ``[k, tau_index]`` or
    ``[k, tau_index, stop_index]``, the same mapping as the envs
    (:func:`specrl.envs.actions.to_engine_action`): ``Action(k, tau_grid[tau_index], stop=rule)``,
    where ``rule`` is the per-token stop rule of ``stop_grid[stop_index]`` over the policy's own
    acceptance predictor (:func:`~specrl.controllers.stop_rules.stop_rule_table`). So both decisions
    run: the step's cap and cut, chosen from the observation, and the stop after each drafted token,
    from that token's signals and its position (through the running product). It is stateless:
    the features carry the history, so :meth:`reset` and :meth:`observe` do nothing.

    Inference runs on CPU under ``torch.inference_mode()`` with a preallocated (1, 19) input and
    a precomputed table of actions, so a decision allocates almost nothing; the global torch
    thread settings are left as the caller set them (a (1, 64) matmul never uses a second
    thread anyway). One instance is not safe to share between threads (the input buffer is).

    A policy is trained on one model pair; it runs on any (the features are pair-independent),
    but its choices fit the pair it learned. :meth:`pair_warning` says when they differ. k is
    at most the policy's ``k_max``; the engine still clips k to the context window and the
    remaining token budget, as for every controller.

    Attributes:
        policy: the loaded :class:`~specrl.export.ExportedPolicy`.
        metadata: its ``metadata.json``.
        k_max: the largest k it picks.
        tau_grid: the tau values it picks from.
        pair: name of the pair it was trained on.

    Example::

        controller = LearnedController.load("policies/default")
        decoder = specrl.SpeculativeDecoder(pair, controller)
    """

    def __init__(self, policy: ExportedPolicy) -> None:
        self.policy = policy
        self.metadata = policy.metadata
        self.k_max = policy.k_max
        self.tau_grid = policy.tau_grid
        self.pair = policy.pair
        self._module = policy.module
        self._input = torch.zeros(1, N_FEATURES)  # (1, 19), reused by every act
        self._input_row = self._input.numpy()[0]  # a numpy view of the same memory
        self.stop_grid = policy.stop_grid
        rules = stop_rule_table(policy.predictor, policy.stop_grid or (0.0,))
        self._actions = tuple(
            tuple(tuple(Action(k, tau, stop=rule) for rule in rules) for tau in self.tau_grid)
            for k in range(self.k_max + 1)
        )

    @classmethod
    def load(cls, folder: str | Path) -> LearnedController:
        """Load and verify a policy folder (raises :class:`~specrl.export.PolicyError` with the fix)."""
        return cls(load_policy(folder))

    @property
    def name(self) -> str:
        """Short label for tables: ``learned:<folder name>``."""
        return f"learned:{self.policy.folder.name}"

    def pair_warning(self, pair_name: str) -> str | None:
        """A warning when the policy was trained on another pair than ``pair_name``, else None."""
        if pair_name == self.pair:
            return None
        return (
            f"policy {self.policy.folder} was trained on pair {self.pair!r} but runs on {pair_name!r}: the "
            "output is still exact, but the speed-up may not carry over"
        )

    def reset(self) -> None:
        """Nothing to forget: the observation carries the history."""

    def act(self, observation: Any) -> Action:
        """The policy's deterministic action for one (19,) observation.

        Raises:
            ValueError: the observation does not have shape (19,).
        """
        if np.shape(observation) != (N_FEATURES,):
            raise ValueError(
                f"LearnedController expects the ({N_FEATURES},) observation of specrl.features "
                f"(feature version {self.metadata['feature_version']}), got shape {np.shape(observation)}"
            )
        self._input_row[:] = observation
        with torch.inference_mode():
            k, tau_index, *stop_index = self._module(self._input)[0].tolist()
        return self._actions[k][tau_index][stop_index[0] if stop_index else 0]

    def observe(self, result: StepResult) -> None:
        """Ignored: the next observation already reflects the result."""

    def __repr__(self) -> str:
        return f"LearnedController.load({str(self.policy.folder)!r})"
