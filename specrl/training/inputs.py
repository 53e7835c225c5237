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
from typing import Any

import yaml

from specrl.envs import Scenario, cached_traces, load_scenario
from specrl.latency import LatencyFamily, LatencyModel, calibrated
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


#: The budget keys a run reads from ``train:`` (besides those the YAML sets).
TRAIN_KEYS = (
    "total_timesteps",
    "n_envs",
    "eval_freq",
    "checkpoint_freq",
    "normalize_observations",
    "kl_to_clone",
    "demonstrations",
)
#: Keyword arguments of stable_baselines3.PPO that ``-p`` may set though the YAML leaves them out.
PPO_KEYS = (
    "n_steps",
    "batch_size",
    "n_epochs",
    "learning_rate",
    "gamma",
    "gae_lambda",
    "clip_range",
    "clip_range_vf",
    "normalize_advantage",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "use_sde",
    "sde_sample_freq",
    "target_kl",
    "policy_kwargs",
)
DEMONSTRATIONS = ("selection", "family")  # where the priced rule teaches (warm_start.py's ``family``)


def resolve_config(
    path: str | Path,
    *,
    real_loop: bool,
    overrides: dict[str, int | float | None],
    hyperparameters: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The PPO hyperparameters and the budget of the YAML at ``path`` (its ``ppo`` and ``train``).

    ``hyperparameters`` (``-p key:value``) replace a key of either section; ``overrides`` (the
    command line's own flags; None: the YAML's) replace budget keys last. In the real loop the
    YAML's env count (the replay's, hundreds) becomes one per core, at most :data:`REAL_ENVS`.

    Raises:
        OptionError: a key of ``hyperparameters`` in neither section (the nearest key named), or a
            ``train:`` value out of range.
    """
    config = yaml.safe_load(Path(path).read_text())
    hyper, budget = dict(config["ppo"]), dict(config["train"])
    if real_loop:
        budget["n_envs"] = min(REAL_ENVS, os.cpu_count() or 1)
    for key, value in (hyperparameters or {}).items():
        if key in budget or key in TRAIN_KEYS:
            budget[key] = value
        elif key in hyper or key in PPO_KEYS:
            hyper[key] = value
        else:
            known = sorted({*budget, *hyper, *TRAIN_KEYS, *PPO_KEYS})
            near = difflib.get_close_matches(key, known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else f"; known: {', '.join(known)}"
            raise OptionError(f"-p {key}: not a key of {path}'s ppo: or train: sections{hint}")
    budget.update({key: value for key, value in overrides.items() if value is not None})
    if budget.setdefault("demonstrations", "selection") not in DEMONSTRATIONS:
        raise OptionError(
            f"{path}: train.demonstrations must be one of {list(DEMONSTRATIONS)}, got "
            f"{budget['demonstrations']!r}"
        )
    if budget.setdefault("kl_to_clone", 0.0) < 0:
        raise OptionError(
            f"{path}: train.kl_to_clone must be >= 0 (0: no penalty), got {budget['kl_to_clone']}"
        )
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
                    "the scenarios a policy trains and is selected on must share k_max, tau_grid and "
                    f"drafters (one action space): {first.name!r} has k_max {first.k_max}, drafters "
                    f"{list(first.drafters)}, but {s.name!r} has k_max {s.k_max}, drafters {list(s.drafters)}"
                    f"{'' if tuple(s.tau_grid) == space.tau_grid else ' and another tau_grid'}"
                )
            if stop and tuple(s.stop_grid) != space.stop_grid:
                raise ActionSpaceError("all training scenarios must share stop_grid (one action space)")
        return space


def add_latency_profile_arguments(parser: argparse.ArgumentParser, batch: bool = False) -> None:
    """``--latency-profiles`` and ``--perturbations`` (:func:`training_machines`) on ``parser``;
    ``batch``: over the batch simulator's profiles."""
    parser.add_argument(
        "--latency-profiles",
        nargs="+",
        default=[FAMILY],
        metavar="PROFILE",
        help=f"the machines training episodes are priced by: '{FAMILY}' (default: the shipped family, "
        f"specrl.latency.family), '{MACHINE}' (this machine's calibration alone) or profile names "
        f"({', '.join(profiles_known(batch))})",
    )
    parser.add_argument(
        "--perturbations",
        type=int,
        default=None,
        help="perturbed models per profile besides the profile itself (default: the family's, 6)",
    )
    parser.add_argument(
        "--select-profiles",
        nargs="+",
        default=None,
        metavar="PROFILE",
        help="the profiles checkpoint selection and the warm start score under, among those trained "
        "over (default: the family's selection profiles, or every named profile)",
    )


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


def check_latency_profile_arguments(
    parser: argparse.ArgumentParser, args: argparse.Namespace, batch: bool = False
) -> None:
    """``parser.error`` on an unknown profile or a negative ``--perturbations``."""
    known = [FAMILY, MACHINE, *profiles_known(batch)]
    unknown = [name for name in args.latency_profiles if name not in known]
    if unknown:
        parser.error(f"--latency-profiles: unknown {unknown}; known: {known}")
    if args.perturbations is not None and args.perturbations < 0:
        parser.error(f"--perturbations must be >= 0, got {args.perturbations}")
    if args.select_profiles is not None:
        family = list(LatencyFamily.training(batch).names) if args.latency_profiles == [FAMILY] else None
        trained = family if family is not None else args.latency_profiles
        outside = [name for name in args.select_profiles if name not in trained]
        if MACHINE in args.latency_profiles or outside:
            parser.error(
                f"--select-profiles {outside or args.select_profiles}: give profiles trained over "
                f"({', '.join(n for n in trained if n != MACHINE)})"
            )


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
        machine alone, its device."""
        if self.family is None:
            (latency,) = self.select.values()
            return {
                "profiles": [MACHINE],
                "machine": latency.device,
                "selected_under": [MACHINE],
            }
        return {
            **self.family.describe(),
            "selected_under": list(self.select),
        }

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
    ``latency``; ``[FAMILY]``: the shipped family, scored under :data:`SELECT_PROFILES`
    (``batch``: the family of models over batch sizes, scored under
    :data:`SELECT_BATCH_PROFILES`); profile names: a family of them (``perturbations`` around
    each, the family's default if None), scored under each of them. A family must price every
    one of ``drafters`` on every profile (the shipped profiles price every drafter of the pool:
    :func:`specrl.latency.family.with_pool_prices`). ``select``: the profiles to score under
    instead (each one of the family's)."""
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
    report and the real loop), the ``machines`` training episodes are priced by (None: that model),
    the ``footings`` selection scores under and the ``teachers`` the warm start clones rules under
    (profile name -> latency model; None: this machine's),
    their shared action space, the train traces of each training scenario (training) and the
    validation traces (checkpoint selection only) of each scenario it is ``selected_on`` (the
    training ones first), by name."""

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
        latency = calibrated(pair, k_max=space.k_max, drafters=space.drafters)
        machines = training_machines(profiles, latency, perturbations, space.drafters, select=select_profiles)
        train = {s.name: cached_traces(s, "train", pair) for s in scenarios}
        validation = {s.name: cached_traces(s, "validation", pair) for s in selected_on}
        return cls(
            scenarios,
            pair,
            latency,
            space,
            train,
            validation,
            selected_on,
            machines,
        )

    def describe(self) -> str:
        """The pair, where it runs, what its latency model prices, and the machines it trains over."""
        latency = self.latency
        line = (
            f"pair {self.pair.name} on {self.pair.device}; latency model {latency.device}: target "
            f"{latency.target_seconds(1, 256) * 1e3:.2f} ms (1 token, context 256), draft "
            f"{latency.draft_seconds(256) * 1e3:.2f} ms; plain {latency.plain_tokens_per_s:.0f} tokens/s"
        )
        return f"{line}; {self.machines.line()}"
