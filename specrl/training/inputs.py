"""What a PPO run trains on (``specrl train``'s step 1): the scenarios, the
resolved config, the pair with its latency model on this machine, the machines training episodes
are priced by (a :class:`~specrl.latency.LatencyFamily`, or this machine alone), the profiles
selection and the warm start score under, the action space the scenarios share, and their train
and validation traces."""

from __future__ import annotations

import argparse
import difflib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specrl.envs import Scenario, cached_traces, load_scenario
from specrl.envs.scenario.sources import machine_latency
from specrl.latency import LatencyFamily, LatencyModel
from specrl.latency.family import profiles_known
from specrl.models import ModelPair
from specrl.traces import TraceSet
from specrl.training.options import (  # noqa: F401  (re-exported: where runs read them)
    DEFAULT_EVAL_SCENARIOS,
    DEFAULT_SCENARIOS,
    FAMILY,
    MACHINE,
    REAL_ENVS,
    OptionError,
)
from specrl.validation import explain, known_fields

# The profiles a run over the family selects checkpoints and clones rules under: a measured CPU
# and a GPU-like one, both in the training family (never a held-out profile).
SELECT_PROFILES = ("cpu-epyc-2t-nov", "gpu-like-a100")
# The batch policy's (train_batch.py over the family of batch models): a measured CPU batch
# calibration and a GPU-like profile, both in its training family.
SELECT_BATCH_PROFILES = ("cpu-xeon-1t", "gpu-like-a100")


class ActionSpaceError(ValueError):
    """Training scenarios that do not share one action space."""


def load_scenarios(names: Iterable[str], preset: str | None) -> list[Scenario]:
    """Scenarios by name, on ``preset``'s pair if given, with modeled time."""
    return [load_scenario(name).with_overrides(time="modeled", preset=preset) for name in names]


class TrainSection(BaseModel):
    """The ``train:`` section of the hyperparameter YAML: the run's budget."""

    model_config = ConfigDict(extra="forbid", strict=True)

    total_timesteps: int | None = Field(None, ge=0)  # env steps over all envs (0: the warm start alone)
    n_envs: int | None = Field(None, ge=1)  # episodes stepped together
    eval_freq: int | None = Field(None, ge=1)  # env steps between evaluations on validation
    checkpoint_freq: int | None = Field(None, ge=1)  # env steps between checkpoints
    normalize_observations: bool | None = None  # VecNormalize the features too
    kl_to_clone: float = Field(0.0, ge=0)  # reward lost per nat of KL from the clone (0: none)
    demonstrations: Literal["selection", "family"] = "selection"  # where the priced rule teaches


class PPOSection(BaseModel):
    """The ``ppo:`` section: keyword arguments of stable_baselines3.PPO, passed as they are (those
    left out keep SB3's defaults)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    n_steps: int | None = Field(None, ge=1)
    batch_size: int | None = Field(None, ge=1)
    n_epochs: int | None = Field(None, ge=1)
    learning_rate: float | None = Field(None, gt=0)
    gamma: float | None = Field(None, ge=0, le=1)
    gae_lambda: float | None = Field(None, ge=0, le=1)
    clip_range: float | None = Field(None, gt=0)
    clip_range_vf: float | None = None
    normalize_advantage: bool | None = None
    ent_coef: float | None = None
    vf_coef: float | None = None
    max_grad_norm: float | None = None
    use_sde: bool | None = None
    sde_sample_freq: int | None = None
    target_kl: float | None = None
    policy_kwargs: dict[str, Any] | None = None


class HyperparameterFile(BaseModel):
    """A hyperparameter YAML (``policies/ppo.yaml``); ``batch:`` is train_batch.py's ``ppo:``
    replacements."""

    model_config = ConfigDict(extra="forbid", strict=True)

    train: TrainSection
    ppo: PPOSection
    batch: PPOSection | None = None


SECTIONS = {"train": TrainSection, "ppo": PPOSection, "batch": PPOSection}


def read_mapping(path: str | Path) -> dict[str, Any]:
    """The YAML at ``path``, which must be a mapping (:class:`OptionError` otherwise)."""
    config = yaml.safe_load(Path(path).read_text())
    if not isinstance(config, dict):
        raise OptionError(f"{path}: must be a mapping with ppo: and train: sections, got {config!r}")
    return config


def validated(path: str | Path, config: dict[str, Any]) -> HyperparameterFile:
    """``config`` (read from ``path``) as a :class:`HyperparameterFile`; an unknown key or a wrong
    value is an :class:`OptionError` naming the key (the nearest valid one for a misspelling)."""
    try:
        return HyperparameterFile.model_validate(config)
    except ValidationError as error:
        known = lambda loc: known_fields(SECTIONS[loc[0]] if loc else HyperparameterFile)  # noqa: E731
        raise OptionError(f"{path}: {explain(error, known)}") from None


def resolve_config(
    path: str | Path,
    *,
    real_loop: bool,
    overrides: dict[str, int | float | None],
    hyperparameters: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The PPO hyperparameters and the budget of the YAML at ``path`` (its ``ppo`` and ``train``,
    validated by :class:`HyperparameterFile`).

    ``hyperparameters`` (``-p key:value``) replace a key of either section; ``overrides`` (the
    command line's own flags; None: the YAML's) replace budget keys last. In the real loop the
    YAML's env count (the replay's, hundreds) becomes one per core, at most :data:`REAL_ENVS`.

    Raises:
        OptionError: an unknown key in the YAML or in ``hyperparameters`` (the nearest key named),
            or a value of the wrong type or out of range.
    """
    config = read_mapping(path)
    hyper, budget = dict(config.get("ppo") or {}), dict(config.get("train") or {})
    if real_loop:
        budget["n_envs"] = min(REAL_ENVS, os.cpu_count() or 1)
    for key, value in (hyperparameters or {}).items():
        if key in TrainSection.model_fields:
            budget[key] = value
        elif key in PPOSection.model_fields:
            hyper[key] = value
        else:
            known = sorted({*TrainSection.model_fields, *PPOSection.model_fields})
            near = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known: {', '.join(known)}"
            raise OptionError(f"-p {key}: not a key of {path}'s ppo: or train: sections{hint}")
    budget.update({key: value for key, value in overrides.items() if value is not None})
    valid = validated(path, {**config, "ppo": hyper, "train": budget})
    # the keys the YAML and the command line set, and the defaults of those a config may leave out
    train = valid.train.model_dump(exclude_unset=True)
    train |= {"demonstrations": valid.train.demonstrations, "kl_to_clone": valid.train.kl_to_clone}
    return valid.ppo.model_dump(exclude_unset=True), train


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
                    "the scenarios a policy trains and is selected on must share k_max, tau_grid and "
                    f"drafters (one action space): {first.name!r} has k_max {first.k_max}, drafters "
                    f"{list(first.drafters)}, but {s.name!r} has k_max {s.k_max}, drafters {list(s.drafters)}"
                    f"{'' if tuple(s.tau_grid) == space.tau_grid else ' and another tau_grid'}"
                )
            if stop and tuple(s.stop_grid) != space.stop_grid:
                raise ActionSpaceError("all training scenarios must share stop_grid (one action space)")
        return space


def named_policies(
    parser: argparse.ArgumentParser, flag: str, items: Iterable[str], reserved: Iterable[str] = ()
) -> dict[str, str]:
    """``NAME=POLICY`` arguments of ``flag`` (a shipped policy's name or a folder) by name;
    ``parser.error`` on one without a name or a policy, or with a name of ``reserved``."""
    reserved, named = set(reserved), {}
    for item in items:
        name, _, where = item.partition("=")
        if not name or not where or name in reserved:
            other = f", NAME other than {sorted(reserved)}" if reserved else ""
            parser.error(f"{flag} {item!r}: give NAME=POLICY (a shipped policy's name or a folder){other}")
        named[name] = where
    return named


def check_latency_profiles(
    latency_profiles: Sequence[str],
    perturbations: int | None,
    select_profiles: Sequence[str] | None,
    batch: bool = False,
) -> None:
    """Refuse an unknown profile, a negative perturbation count, or selection profiles outside those
    trained over, before anything loads.

    Raises:
        OptionError: naming the option and what it may be.
    """
    known = [FAMILY, MACHINE, *profiles_known(batch)]
    unknown = [name for name in latency_profiles if name not in known]
    if unknown:
        raise OptionError(f"--latency-profiles: unknown {unknown}; known: {known}")
    if perturbations is not None and perturbations < 0:
        raise OptionError(f"--perturbations must be >= 0, got {perturbations}")
    if select_profiles is not None:
        family = list(LatencyFamily.training(batch).names) if list(latency_profiles) == [FAMILY] else None
        trained = family if family is not None else list(latency_profiles)
        outside = [name for name in select_profiles if name not in trained]
        if MACHINE in latency_profiles or outside:
            raise OptionError(
                f"--select-profiles {outside or list(select_profiles)}: give profiles trained over "
                f"({', '.join(n for n in trained if n != MACHINE)})"
            )


def check_latency_profile_arguments(
    parser: argparse.ArgumentParser, args: argparse.Namespace, batch: bool = False
) -> None:
    """``parser.error`` on what :func:`check_latency_profiles` refuses."""
    try:
        check_latency_profiles(args.latency_profiles, args.perturbations, args.select_profiles, batch)
    except OptionError as error:
        parser.error(str(error))


@dataclass(frozen=True)
class Machines:
    """What ``--latency-profiles`` names: the ``family`` training episodes draw from (None: this
    machine's calibration alone) and the profiles checkpoint selection and the warm start score
    under (``select``: profile name -> latency model)."""

    family: LatencyFamily | None
    select: dict[str, LatencyModel]

    def describe(self) -> dict[str, Any]:
        """What a policy's metadata records as ``latency_profiles``: the family (its profiles,
        perturbations, held-out profiles), the profiles selected and taught under; or, for this
        machine alone, its device, and a serving engine's prices whole (``prices``: the model's
        dict, the prior specrl's proposer gives the policy's features inside vLLM)."""
        if self.family is None:
            (latency,) = self.select.values()
            described = {"profiles": [MACHINE], "machine": latency.device, "selected_under": [MACHINE]}
            if latency.kind == "serving":  # a serving engine's prices: the policy carries them
                described["prices"] = latency.to_dict()
            return described
        return {**self.family.describe(), "selected_under": list(self.select)}

    def line(self) -> str:
        """The machines in words, for a run's log."""
        if self.family is None:
            return "trained on this machine's prices"
        return (
            f"trained over {len(self.family.names)} latency profiles ({', '.join(self.family.names)}; "
            f"{self.family.perturbations} perturbations each), selected under {', '.join(self.select)}"
        )


def training_machines(
    names: Sequence[str],
    latency: LatencyModel,
    perturbations: int | None = None,
    drafters: Sequence[str] = (),
    batch: bool = False,
    select: Sequence[str] | None = None,
) -> Machines:
    """What ``--latency-profiles`` names (:class:`Machines`). ``[MACHINE]``: this machine's
    ``latency``; ``[FAMILY]``: the shipped family (``batch``: over batch sizes), scored under
    :data:`SELECT_PROFILES` (:data:`SELECT_BATCH_PROFILES`); profile names: a family of them
    (``perturbations`` around each), scored under each. ``select``: the profiles to score under
    instead. A family must price every one of ``drafters`` on every profile."""
    names = list(names)
    if names == [MACHINE]:
        return Machines(None, {MACHINE: latency})
    if MACHINE in names or (FAMILY in names and len(names) > 1):
        raise ValueError(f"--latency-profiles: give '{MACHINE}', '{FAMILY}' or profile names, not {names}")
    family = LatencyFamily.training(batch) if names == [FAMILY] else LatencyFamily(tuple(names), batch=batch)
    if perturbations is not None:
        family = LatencyFamily(family.names, perturbations=perturbations, batch=batch)
    unpriced = sorted({d for group in family.models for model in group for d in model.unpriced(drafters)})
    if unpriced:
        raise ValueError(
            f"the latency profiles {list(family.names)} do not all price the drafters {unpriced}; "
            f"train these scenarios on this machine's prices: --latency-profiles {MACHINE}"
        )
    if select is None:
        select = family.names
        if names == [FAMILY]:
            select = SELECT_BATCH_PROFILES if batch else SELECT_PROFILES
    return Machines(family, {name: family.profile(name) for name in select})


@dataclass
class RunInputs:
    """What a run trains on: the scenarios, the pair, its latency model on this machine (the test
    report and the real loop), their shared action space, the train traces of each training
    scenario and the validation traces (checkpoint selection only) of each scenario it is
    ``selected_on`` (the training ones first), by name, and the ``machines`` it trains over."""

    scenarios: list[Scenario]
    pair: ModelPair
    latency: LatencyModel
    space: ActionSpace
    train: dict[str, TraceSet]
    validation: dict[str, TraceSet]
    selected_on: list[Scenario]
    machines: Machines

    @classmethod
    def load(
        cls,
        scenarios: list[Scenario],
        *,
        stop: bool,
        select: Sequence[Scenario] = (),
        profiles: Sequence[str] = (MACHINE,),
        perturbations: int | None = None,
        select_profiles: Sequence[str] | None = None,
    ) -> RunInputs:
        """The pair (built if missing), its latency model (calibrated and cached if missing) and
        the traces (shipped, cached or collected now); ``stop``: with the per-token stop dimension;
        ``select``: scenarios checkpoint selection scores on besides the training ones (their
        validation traces only; they must share the action space); ``profiles`` and
        ``perturbations``: the machines, ``select_profiles`` those scored under
        (:func:`training_machines`)."""
        names = {s.name for s in scenarios}
        selected_on = list(scenarios) + [s for s in select if s.name not in names]
        space = ActionSpace.shared_by(selected_on, stop)
        pair = scenarios[0].pair.load()
        latency = machine_latency(scenarios, pair, space.k_max, space.drafters)
        machines = training_machines(profiles, latency, perturbations, space.drafters, select=select_profiles)
        train = {s.name: cached_traces(s, "train", pair) for s in scenarios}
        validation = {s.name: cached_traces(s, "validation", pair) for s in selected_on}
        return cls(scenarios, pair, latency, space, train, validation, selected_on, machines)

    def describe(self) -> str:
        """The pair, where it runs, what its latency model prices, and the machines it trains over."""
        latency = self.latency
        line = (
            f"pair {self.pair.name} on {self.pair.device}; latency model {latency.device}: target "
            f"{latency.target_seconds(1, 256) * 1e3:.2f} ms (1 token, context 256), draft "
            f"{latency.draft_seconds(256) * 1e3:.2f} ms; plain {latency.plain_tokens_per_s:.0f} tokens/s"
        )
        return f"{line}; {self.machines.line()}"
