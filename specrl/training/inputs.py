"""What a PPO run trains on (``experiments/train_ppo.py``'s step 1): the scenarios, the
resolved config, the pair with its latency model on this machine, the action space the scenarios
share, and their train and validation traces."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specrl.envs import Scenario, cached_traces, load_scenario
from specrl.latency import LatencyModel, calibrated
from specrl.models import ModelPair
from specrl.traces import TraceSet

REAL_ENVS = 4  # the env count of training in the real loop (at most the CPU count)


class ActionSpaceError(ValueError):
    """Training scenarios that do not share one action space."""


def load_scenarios(names: Iterable[str], preset: str | None) -> list[Scenario]:
    """Scenarios by name, on ``preset``'s pair if given, with modeled time."""
    return [load_scenario(name).with_overrides(time="modeled", preset=preset) for name in names]


def resolve_config(
    path: str | Path, *, real_loop: bool, overrides: dict[str, int | None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The PPO hyperparameters and the budget of the YAML at ``path`` (its ``ppo`` and ``train``),
    the budget with the command line's ``overrides`` (None: the YAML's). In the real loop the
    YAML's env count (the replay's, hundreds) becomes one per core, at most :data:`REAL_ENVS`."""
    config = yaml.safe_load(Path(path).read_text())
    hyper, budget = dict(config["ppo"]), dict(config["train"])
    if real_loop:
        budget["n_envs"] = min(REAL_ENVS, os.cpu_count() or 1)
    budget.update({key: value for key, value in overrides.items() if value is not None})
    return hyper, budget


@dataclass(frozen=True)
class ActionSpace:
    """The action space the training scenarios share: k up to ``k_max``, tau on ``tau_grid``, the
    drafter among ``drafters`` and, with the per-token stop dimension, the stop threshold on
    ``stop_grid`` (None without it)."""

    k_max: int
    tau_grid: tuple[float, ...]
    drafters: tuple[str, ...]
    stop_grid: tuple[float, ...] | None

    @classmethod
    def shared_by(cls, scenarios: Sequence[Scenario], stop: bool) -> ActionSpace:
        """The first scenario's space; :class:`ActionSpaceError` if another's differs (one policy,
        one action space)."""
        first = scenarios[0]
        space = cls(
            first.k_max, tuple(first.tau_grid), first.drafters, tuple(first.stop_grid) if stop else None
        )
        for s in scenarios:
            if s.k_max != space.k_max or tuple(s.tau_grid) != space.tau_grid or s.drafters != space.drafters:
                raise ActionSpaceError(
                    "all training scenarios must share k_max, tau_grid and drafters (one action space)"
                )
            if stop and tuple(s.stop_grid) != space.stop_grid:
                raise ActionSpaceError("all training scenarios must share stop_grid (one action space)")
        return space


@dataclass
class RunInputs:
    """What a run trains on: the scenarios, the pair, its latency model on this machine, their
    shared action space, the train traces of each training scenario (training) and the validation
    traces (checkpoint selection only) of each scenario it is ``selected_on`` (the training ones
    first), by name."""

    scenarios: list[Scenario]
    pair: ModelPair
    latency: LatencyModel
    space: ActionSpace
    train: dict[str, TraceSet]
    validation: dict[str, TraceSet]
    selected_on: list[Scenario]

    @classmethod
    def load(cls, scenarios: list[Scenario], *, stop: bool, select: Sequence[Scenario] = ()) -> RunInputs:
        """The pair (built if missing), its latency model (calibrated and cached if missing) and
        the traces (shipped, cached or collected now); ``stop``: with the per-token stop dimension;
        ``select``: scenarios checkpoint selection scores on besides the training ones (their
        validation traces only; they must share the action space)."""
        names = {s.name for s in scenarios}
        selected_on = list(scenarios) + [s for s in select if s.name not in names]
        space = ActionSpace.shared_by(selected_on, stop)
        pair = scenarios[0].pair.load()
        latency = calibrated(pair, k_max=space.k_max, drafters=space.drafters)
        train = {s.name: cached_traces(s, "train", pair) for s in scenarios}
        validation = {s.name: cached_traces(s, "validation", pair) for s in selected_on}
        return cls(scenarios, pair, latency, space, train, validation, selected_on)

    def describe(self) -> str:
        """One line: the pair, where it runs, and what its latency model prices."""
        latency = self.latency
        return (
            f"pair {self.pair.name} on {self.pair.device}; latency model {latency.device}: target "
            f"{latency.target_seconds(1, 256) * 1e3:.2f} ms (1 token, context 256), draft "
            f"{latency.draft_seconds(256) * 1e3:.2f} ms; plain {latency.plain_tokens_per_s:.0f} tokens/s"
        )
