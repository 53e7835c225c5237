"""What a PPO run is asked to do: :class:`TrainOptions`, one field per ``specrl train`` option.

This module imports nothing heavy, so that the command's ``--help`` and its argument checks run
before torch loads; :func:`specrl.train.train` does the work.
"""

from __future__ import annotations

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

# Eight parts, as many as before C headers and Perl joined: each part of the ScenarioMix costs
# a vectorised step of its own, so code, prose and math train together in "mixed" (one domain
# per episode) and the default run keeps its time budget.
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


@dataclass
class TrainOptions:
    """One PPO run (``specrl train``; each field is the option of the same name, ``_`` for ``-``)."""

    scenarios: list[str] = field(default_factory=lambda: list(DEFAULT_SCENARIOS))
    """Training scenarios (shipped names or YAML paths); envs are split as evenly as possible."""
    preset: str | None = None
    """Embedded pair to use instead of the scenarios' own (small, tiny)."""
    config: str = DEFAULT_CONFIG
    """Hyperparameter YAML (``ppo:`` for SB3's PPO, ``train:`` for the budget)."""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    """Overrides of the YAML's keys, ``ppo`` or ``train`` (``-p key:value``)."""
    total_timesteps: int | None = None
    """PPO env steps (None: the YAML's; 0: export the warm start, the rules cloned, untouched)."""
    n_envs: int | None = None
    """Parallel replayed episodes (None: the YAML's; in the real loop REAL_ENVS at most)."""
    eval_freq: int | None = None
    """Env steps between evaluations on validation traces (None: the YAML's)."""
    kl_to_clone: float | None = None
    """Reward penalty per nat of KL from the warm start's clone (None: the YAML's, or 0)."""
    seed: int = 0
    """Seed of PPO and of the simulators."""
    device: str = "cpu"
    """Device of the PPO networks (the MLP is tiny: cpu)."""
    exp_name: str = "ppo"
    """Experiment name in the run folder's name."""
    runs_dir: str = "runs"
    """Folder of run folders (TensorBoard, checkpoints, the exported policy under ``policy/``)."""
    export_as: str | None = None
    """Also export the policy as NAME under ``$SPECRL_HOME/policies`` (``LearnedController.load(NAME)``),
    or into a folder when it holds a path separator. Never replaces a shipped policy."""
    resume: str | None = None
    """Continue the run saved in this run folder."""
    eval_scenarios: list[str] | None = None
    """Scenarios added to the final comparison on test traces (the training ones always are).
    None: the embedded domains one by one when training on shipped scenarios, else none."""
    select_scenarios: list[str] | None = None
    """Scenarios checkpoint selection also scores on, on their validation traces. None: the
    embedded domains when training on shipped scenarios, else none (the training ones only)."""
    validate_scenarios: list[str] | None = None
    """Scenarios validated in the real loop (wall clock); empty to skip. None: four embedded ones
    when training on shipped scenarios, else the training scenarios."""
    validate_prompts: int = 2
    """Test prompts per domain of a validated scenario."""
    validate_repeats: int = 2
    """Repeats of the real-loop validation (the median is reported)."""
    sim_repeats: int = 4
    """Acceptance draws per trace for sampled scenarios."""
    stop: bool = True
    """Train with the per-token stop dimension (False: actions [k, tau_index] only)."""
    warm_start: bool = True
    """Start PPO from a clone of each training scenario's best rule on validation."""
    train_on: str = "replay"
    """replay: the trace-replay simulator; real: the real loop on train prompts (slow)."""
    latency_profiles: list[str] = field(default_factory=lambda: [FAMILY])
    """The machines training episodes are priced by: 'family', 'machine' or profile names."""
    perturbations: int | None = None
    """Perturbed models per profile besides the profile itself (None: the family's)."""
    select_profiles: list[str] | None = None
    """The profiles checkpoint selection and the warm start score under (None: the family's)."""
    subproc: bool = False
    """With train_on real: each env in its own process (SB3's SubprocVecEnv)."""

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
        None filled in: the embedded domains' when every training scenario is ``shipped``; else
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

    def as_dict(self) -> dict[str, Any]:
        """The options as plain values (the run folder's ``arguments``)."""
        return dataclasses.asdict(self)


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
