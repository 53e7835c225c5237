"""A trained policy as a controller: the exported ``torch.export`` program picks (k, tau) every iteration,
and, for a policy with a stop dimension, the per-token stop rule the engine asks inside the draft loop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from specrl.action_layout import action_sizes
from specrl.controllers.stop_rules import stop_rule_table
from specrl.engine.types import Action, StepResult
from specrl.export import ExportedPolicy, load_policy
from specrl.features import FEATURE_COUNTS, N_FEATURES, PRICED_VERSION, Prices
from specrl.latency.calibration import machine_prices
from specrl.models import served_target, target_folders


class LearnedController:
    """Acts with an exported PPO policy (a policy folder, see :mod:`specrl.export`).

    The policy maps the observation of :mod:`specrl.features` to ``[k, tau_index]`` (and a stop
    index, a drafter index), as the envs do (:func:`specrl.envs.actions.to_engine_action`); the
    stop index picks a per-token stop rule over the policy's own acceptance predictor. It is
    stateless: the features carry the history. Inference runs on CPU through :class:`NumpyPolicy`
    wherever its answer cannot differ from the program's (the program's dispatch in Python is too
    slow for a 1% budget of an iteration), else through the program. Not thread-safe (one input
    buffer). It runs on any pair; :meth:`pair_warning` says when it learned on another.

    Example::

        controller = LearnedController.load("default")   # a shipped policy, or any policy folder
        decoder = specrl.SpeculativeDecoder(pair, controller)
    """

    def __init__(self, policy: ExportedPolicy) -> None:
        self.policy = policy
        self.metadata = policy.metadata
        self.k_max = policy.k_max
        self.tau_grid = policy.tau_grid
        self.pair = policy.pair
        self._program = policy.module
        self.drafters = policy.drafters
        self.n_features = policy.n_features  # it reads the first n of the features
        self._input = torch.zeros(1, self.n_features)  # reused by every act
        self._input_row = self._input.numpy()[0]  # a numpy view of the same memory
        self._fast = NumpyPolicy.of(policy)
        self.stop_grid = policy.stop_grid
        rules = stop_rule_table(policy.predictor, policy.stop_grid or (0.0,))
        self._has_stop, self._has_drafter = bool(policy.stop_grid), len(self.drafters) > 1
        self._actions = tuple(
            tuple(
                tuple(tuple(Action(k, tau, stop=rule, drafter=d) for d in self.drafters) for rule in rules)
                for tau in self.tau_grid
            )
            for k in range(self.k_max + 1)
        )

    @classmethod
    def load(cls, folder: str | Path) -> LearnedController:
        """Load and verify a policy: a folder, or the name of a shipped policy ("default"); raises
        :class:`~specrl.export.PolicyError` with the fix (a missing one lists the shipped names)."""
        return cls(load_policy(folder))

    def __reduce__(self):
        """Pickled as its folder, loaded (and verified) again on the other side: a Ray worker or a
        ``SubprocVecEnv`` process gets the same policy without shipping a program."""
        return (type(self).load, (str(Path(self.policy.folder).resolve()),))

    @property
    def name(self) -> str:
        """Short label for tables: ``learned:<folder name>``."""
        return f"learned:{self.policy.folder.name}"

    def machine_prices(self, pair: Any) -> Prices | None:
        """The prior of the price features when a loop is given none: this machine's cached
        calibrations of ``pair`` for a policy that reads prices (feature version 4 on), else None."""
        if self.n_features < FEATURE_COUNTS[PRICED_VERSION]:
            return None
        return machine_prices(pair, f"policy {self.policy.folder}")

    def pair_warning(self, pair_name: str) -> str | None:
        """A warning when the policy was trained on another pair than ``pair_name``, else None."""
        if pair_name == self.pair:
            return None
        return (
            f"policy {self.policy.folder} was trained on pair {self.pair!r} but runs on {pair_name!r}: the "
            "output is still exact, but the speed-up may not carry over"
        )

    def target_warning(self, target: str | Path) -> str | None:
        """:meth:`pair_warning` for a host that knows only the target it serves (vLLM's model, HF
        ``generate``'s): None when ``target`` is the policy's pair's target."""
        if served_target(target) in target_folders(self.pair):
            return None
        return self.pair_warning(f"{target} (the target served)")

    def reset(self) -> None:
        """Nothing to forget: the observation carries the history."""

    def act(self, observation: Any) -> Action:
        """The policy's deterministic action for one (N_FEATURES,) observation (it reads its
        version's first :attr:`n_features`); ValueError for another shape."""
        if np.shape(observation) != (N_FEATURES,):
            raise ValueError(
                f"LearnedController expects the ({N_FEATURES},) observation of specrl.features, got "
                f"shape {np.shape(observation)}"
            )
        observation = observation[: self.n_features]
        indices = None if self._fast is None else self._fast(observation)
        return self._action(observation if indices is None else indices, indices is None)

    def act_rows(self, observations: Any) -> list[Action]:
        """:meth:`act` of each row of an (R, N_FEATURES) array, in one forward of the numpy twin
        (specrl's proposer asks for every request of a vLLM step at once); the same actions."""
        observations = np.asarray(observations)
        if observations.ndim != 2 or observations.shape[1] != N_FEATURES:
            raise ValueError(
                f"LearnedController expects (rows, {N_FEATURES}) observations of specrl.features, got "
                f"shape {observations.shape}"
            )
        observations = observations[:, : self.n_features]
        found = [None] * len(observations) if self._fast is None else self._fast.rows(observations)
        return [
            self._action(row if indices is None else indices, indices is None)
            for row, indices in zip(observations, found, strict=True)
        ]

    def _action(self, found: Any, ask_program: bool) -> Action:
        """The action of the policy's indices ``found``; with ``ask_program``, ``found`` is an
        observation the exported program answers for (the twin is missing or near a tie)."""
        indices = found
        if ask_program:
            self._input_row[:] = found
            with torch.inference_mode():
                indices = self._program(self._input)[0].tolist()
        stop_index = indices[2] if self._has_stop else 0
        drafter_index = indices[-1] if self._has_drafter else 0
        return self._actions[indices[0]][indices[1]][stop_index][drafter_index]

    def observe(self, result: StepResult) -> None:
        """Ignored: the next observation already reflects the result."""

    def __repr__(self) -> str:
        return f"LearnedController.load({str(self.policy.folder)!r})"


TIE_MARGIN = 1e-3  # logits closer than this are left to the exported program (see NumpyPolicy)


class NumpyPolicy:
    """The exported policy's MLP in numpy, for one observation at a time: the computation of
    :class:`specrl.export.PolicyModule`, then the argmax of each action dimension's logits. The
    program's argmax follows a float32 softmax, which can break near-ties differently, so
    :meth:`__call__` returns None (ask the program) when two logits are within :data:`TIE_MARGIN`."""

    ACTIVATIONS = {"Tanh": np.tanh, "ReLU": lambda x: np.maximum(x, 0.0)}
    #: Observations :meth:`of` compares both paths on before it trusts the numpy one.
    PROBES = 64

    def __init__(
        self, layers: list, mean: np.ndarray | None, std: np.ndarray, clip: float, bounds: list[int]
    ):
        self.layers, self.mean, self.std, self.clip = layers, mean, std, clip
        self.slices = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    @classmethod
    def of(cls, policy: ExportedPolicy) -> NumpyPolicy | None:
        """The numpy twin of an exported policy (layers from ``metadata["network"]``, weights from
        the program's state dict), or None when its network is not the known MLP or it acts
        otherwise than the program on :attr:`PROBES` random observations."""
        try:
            network = policy.metadata["network"]
            weights = {name: tensor.detach().numpy() for name, tensor in policy.module.state_dict().items()}
            layers = []
            kinds = [(f"policy_net.{i}", kind) for i, kind in enumerate(network["policy_net"])]
            for prefix, kind in [*kinds, ("action_net", "Linear")]:
                if kind == "Linear":
                    weight = weights[f"{prefix}.weight"].astype(np.float32)
                    bias = weights[f"{prefix}.bias"].astype(np.float32)
                    layers.append((weight.T.copy(), bias))
                elif kind in cls.ACTIVATIONS:
                    layers.append(cls.ACTIVATIONS[kind])
                else:
                    return None
            normalize = policy.metadata["observation_normalized"] is True
            mean = weights["mean"].astype(np.float64) if normalize else None
            std = weights["std"].astype(np.float64)
            sizes = action_sizes(policy.k_max, policy.tau_grid, policy.stop_grid, policy.drafters)
            bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
            twin = cls(layers, mean, std, float(network["observation_clip"]), bounds)
            probes = np.random.default_rng(0).random((cls.PROBES, policy.n_features), dtype=np.float32)
            expected = policy.predict(probes).tolist()
            answers = [twin(probe) for probe in probes] + twin.rows(probes)  # alone, then together
        except (AttributeError, KeyError, IndexError, RuntimeError, TypeError, ValueError):
            return None
        if any(
            answer is not None and answer != want for answer, want in zip(answers, expected * 2, strict=True)
        ):
            return None
        return twin

    def __call__(self, observation: Any) -> list[int] | None:
        """Action indices of one observation of the policy's width, or None near a tie (ask the program)."""
        x = self._logits(observation)
        indices = []
        for part in self.slices:
            logits = x[part]
            best = int(logits.argmax())
            if len(logits) > 1 and np.partition(logits, -2)[-2] > logits[best] - TIE_MARGIN:
                return None
            indices.append(best)
        return indices

    def rows(self, observations: np.ndarray) -> list[list[int] | None]:
        """:meth:`__call__` of each row of ``observations`` (R, the policy's width), in one forward."""
        x = self._logits(observations)
        found = np.empty((len(x), len(self.slices)), dtype=np.int64)
        tie = np.zeros(len(x), dtype=bool)
        for column, part in enumerate(self.slices):
            logits = x[:, part]
            best = logits.argmax(axis=1)
            found[:, column] = best
            if logits.shape[1] > 1:
                chosen = np.take_along_axis(logits, best[:, None], axis=1)[:, 0]
                tie |= np.partition(logits, -2, axis=1)[:, -2] > chosen - TIE_MARGIN
        return [None if near else indices for near, indices in zip(tie.tolist(), found.tolist(), strict=True)]

    def _logits(self, observations: Any) -> np.ndarray:
        """The MLP's output for one observation or a batch of them (float32)."""
        x = np.asarray(observations, dtype=np.float32)
        if self.mean is not None:
            x = np.clip((x.astype(np.float64) - self.mean) / self.std, -self.clip, self.clip).astype(
                np.float32
            )
        for layer in self.layers:
            x = x @ layer[0] + layer[1] if isinstance(layer, tuple) else layer(x)
        return x
