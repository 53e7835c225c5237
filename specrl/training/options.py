"""What a PPO run is asked to do: :class:`TrainOptions`, one field per ``specrl train`` option,
each with its help and how the command line reads it. Imports nothing heavy, so that ``--help``
and the checks run before torch loads; :func:`specrl.train.train` does the work."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REAL_ENVS = 4  # the env count of training in the real loop (at most the CPU count)
MACHINE = "machine"  # --latency-profiles: this machine's calibration alone
FAMILY = "family"  # --latency-profiles: the shipped family (LatencyFamily.training())
#: The hyperparameter file a run reads unless told otherwise (rl-zoo's layout: ``ppo:`` and ``train:``).
DEFAULT_CONFIG = str(Path(__file__).resolve().parents[1] / "policies" / "ppo.yaml")

# Each scenario of the mix costs a vectorised step of its own: eight keep the default run's budget.
DEFAULT_SCENARIOS = (
    "mixed",
    "c_header",
    "perl",
    "code_to_math",
    "mixed_t1",
    "c_header_t1",
    "perl_t1",
    "code_to_math_t1",
)
# Reported on test besides the training scenarios: each domain alone, and the unseen one.
DEFAULT_EVAL_SCENARIOS = ("code", "prose", "math", "code_t1", "prose_t1", "math_t1", "license", "license_t1")
# Scored on validation by checkpoint selection besides the training scenarios.
DEFAULT_SELECT_SCENARIOS = ("code", "prose", "math", "code_t1", "prose_t1", "math_t1")
# Validated in the real loop (wall clock) at the end.
DEFAULT_VALIDATE_SCENARIOS = ("code", "prose", "math", "prose_t1")


class OptionError(ValueError):
    """Options that cannot run together or out of range; the message names the option and the fix."""


def option(value: Any, help: str, group: str = "PPO", **argparse_keywords: Any) -> Any:
    """A :class:`TrainOptions` field: its default ``value``, its ``--help`` line, its group there
    and how ``argparse`` reads it (``flags`` in place of ``--<name>``; ``default``: the parser's, if
    not ``value``)."""
    metadata = {"help": help, "group": group, **argparse_keywords}
    if isinstance(value, (list, dict)):
        return field(default_factory=lambda: type(value)(value), metadata=metadata)
    return field(default=value, metadata=metadata)


WHAT, REPORT, OUTPUT = "what to train on", "selection and report", "output"
#: The options that name the machines training prices episodes by (train_batch.py takes them too).
PROFILE_OPTIONS = ("latency_profiles", "perturbations", "select_profiles")


@dataclass
class TrainOptions:
    """One PPO run (``specrl train``; each field is the option of the same name, ``_`` for ``-``)."""

    scenarios: list[str] = option(
        list(DEFAULT_SCENARIOS), "training scenarios (names or YAML); envs split evenly", WHAT, nargs="+"
    )
    preset: str | None = option(None, "embedded pair instead of the scenarios' (small, tiny)", WHAT)
    train_on: str = option(
        "replay",
        "replay: the trace-replay simulator (default); real: the real loop on train prompts (slow)",
        WHAT,
        choices=("replay", "real"),
    )
    subproc: bool = option(
        False, "with --train-on real: each env in its own process", WHAT, action="store_true"
    )
    latency_profiles: list[str] = option(
        [FAMILY],
        f"machines episodes are priced by: '{FAMILY}' (the shipped family; default), '{MACHINE}' (this "
        "machine's calibration alone) or profile names (specrl.latency.family)",
        WHAT,
        nargs="+",
        metavar="PROFILE",
    )
    perturbations: int | None = option(
        None, "perturbed models per profile (default: the family's, 6)", WHAT, type=int
    )
    select_profiles: list[str] | None = option(
        None,
        "profiles checkpoint selection and the warm start score under (default: the family's)",
        WHAT,
        nargs="+",
        metavar="PROFILE",
    )
    config: str = option(DEFAULT_CONFIG, "hyperparameter YAML (ppo: for SB3's PPO, train: for the budget)")
    hyperparameters: dict[str, Any] = option(
        {},
        "override a key of the YAML's ppo: or train: section (repeatable; values read as YAML)",
        flags=("-p", "--hyperparameter"),
        action="append",
        default=[],
        metavar="KEY:VALUE",
    )
    total_timesteps: int | None = option(
        None, "PPO env steps (default: the YAML's; 0: export the warm start untouched)", type=int
    )
    n_envs: int | None = option(
        None, f"parallel episodes (default: the YAML's; real loop: {REAL_ENVS} at most)", type=int
    )
    eval_freq: int | None = option(None, "env steps between validations (default: the YAML's)", type=int)
    kl_to_clone: float | None = option(
        None,
        "reward penalty per nat of KL from the warm start's clone (default: the YAML's, or 0)",
        type=float,
    )
    warm_start: bool = option(
        True,
        "start from a clone of the best rule on validation (default)",
        action=argparse.BooleanOptionalAction,
    )
    stop: bool = option(
        True, "no per-token stop dimension (actions k, tau)", flags=("--no-stop",), action="store_false"
    )
    seed: int = option(0, "seed of PPO and of the simulators", type=int)
    device: str = option("cpu", "device of the PPO networks (the MLP is tiny: cpu)")
    select_scenarios: list[str] | None = option(
        None,
        "scenarios checkpoint selection also scores on, on validation traces (default: the embedded "
        "domains when training on shipped scenarios, else the training ones only)",
        REPORT,
        nargs="*",
    )
    eval_scenarios: list[str] | None = option(
        None,
        "also reported on test traces (default: the embedded domains and the unseen license when "
        "training on shipped scenarios, else none)",
        REPORT,
        nargs="*",
    )
    validate_scenarios: list[str] | None = option(
        None,
        "checked in the real loop (default: code prose math prose_t1 when training on shipped scenarios, "
        "else the training ones; none: skip)",
        REPORT,
        nargs="*",
    )
    validate_prompts: int = option(2, "test prompts per domain of a validated scenario", REPORT, type=int)
    validate_repeats: int = option(
        2, "repeats of the real-loop check (the median is reported)", REPORT, type=int
    )
    sim_repeats: int = option(4, "acceptance draws per trace for sampled scenarios", REPORT, type=int)
    runs_dir: str = option("runs", "folder of run folders (default runs)", OUTPUT)
    exp_name: str = option("ppo", "experiment name in the run folder's name", OUTPUT)
    export_as: str | None = option(
        None,
        "also export as NAME under $SPECRL_HOME/policies (LearnedController.load(NAME)), or to a folder "
        "path; never replaces a shipped policy",
        OUTPUT,
        metavar="NAME",
    )
    resume: str | None = option(None, "continue the run saved in this run folder", OUTPUT, metavar="RUN_DIR")

    def check(self) -> None:
        """Refuse options out of range or that cannot run together, before anything loads.

        Raises:
            OptionError: naming the option and the fix.
        """
        if self.train_on not in ("replay", "real"):
            raise OptionError(f"--train-on must be replay or real, got {self.train_on!r}")
        if self.train_on == "real" and self.latency_profiles != [MACHINE]:
            raise OptionError(
                f"--train-on real measures this machine's time: give --latency-profiles {MACHINE}"
            )
        if self.subproc and self.train_on != "real":
            raise OptionError("--subproc runs real-loop envs in processes: give it with --train-on real")
        if self.total_timesteps is not None and self.total_timesteps < 0:
            raise OptionError(
                f"--total-timesteps must be >= 0 (0: the warm start alone), got {self.total_timesteps}"
            )
        if self.kl_to_clone is not None and self.kl_to_clone < 0:
            raise OptionError(f"--kl-to-clone must be >= 0 (0: no penalty), got {self.kl_to_clone}")
        if self.kl_to_clone and not self.warm_start:
            raise OptionError("--kl-to-clone keeps PPO near the warm start's clone: drop --no-warm-start")
        if self.total_timesteps == 0 and not self.warm_start:
            raise OptionError("--total-timesteps 0 with --no-warm-start would export an untrained policy")
        for name in ("n_envs", "eval_freq", "validate_prompts", "validate_repeats", "sim_repeats"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise OptionError(f"--{name.replace('_', '-')} must be a positive integer, got {value}")
        if self.resume and not (Path(self.resume) / "state.json").is_file():
            raise OptionError(
                f"--resume {self.resume}: no state.json there; give a run folder written by `specrl train` "
                "(runs/<scenario>__<exp>__<seed>__<time>)"
            )
        if self.export_as is not None and not self.export_as.strip():
            raise OptionError("--export-as needs a policy name (or a folder path)")
        if not Path(self.config).is_file():
            raise OptionError(
                f"--config {self.config}: no such file; give a YAML with ppo: and train: sections"
            )

    def with_scenario_defaults(self, shipped: Collection[str]) -> TrainOptions:
        """These options with the selection, evaluation and validation scenarios that were left
        None filled in: the embedded domains' when every training scenario is one of ``shipped``
        (the shipped scenarios of the embedded pair); else
        the training scenarios' own, so that a run on a user's pair and prompts is selected and
        reported on that pair and those prompts, never on the embedded prompt sets."""
        own = not set(self.scenarios) <= set(shipped)
        defaults = {
            "select_scenarios": [] if own else list(DEFAULT_SELECT_SCENARIOS),
            "eval_scenarios": [] if own else list(DEFAULT_EVAL_SCENARIOS),
            "validate_scenarios": list(self.scenarios) if own else list(DEFAULT_VALIDATE_SCENARIOS),
        }
        return dataclasses.replace(
            self, **{name: value for name, value in defaults.items() if getattr(self, name) is None}
        )


def add_arguments(parser: argparse.ArgumentParser, names: Collection[str] | None = None) -> None:
    """:class:`TrainOptions`' fields (those of ``names`` if given) as options of ``parser``, with
    each field's default, help and group."""
    defaults, groups = TrainOptions(), {}
    for field_ in dataclasses.fields(TrainOptions):
        if names is not None and field_.name not in names:
            continue
        keywords = dict(field_.metadata)
        group = keywords.pop("group")
        if group not in groups:
            groups[group] = parser.add_argument_group(group)
        flags = keywords.pop("flags", ("--" + field_.name.replace("_", "-"),))
        keywords.setdefault("default", getattr(defaults, field_.name))
        groups[group].add_argument(*flags, dest=field_.name, **keywords)


def parse_hyperparameter(item: str) -> tuple[str, Any]:
    """``key:value`` (rl-zoo's ``-params``) as ``(key, value)``, the value read as YAML (``0.001``,
    ``[64, 64]``, ``true``).

    Raises:
        OptionError: no ``:`` or no key.
    """
    import yaml  # light, but only this needs it

    key, sep, value = item.partition(":")
    if not sep or not key.strip():
        raise OptionError(f"-p {item!r}: give key:value, e.g. -p learning_rate:0.001 -p n_envs:64")
    return key.strip(), yaml.safe_load(value)
