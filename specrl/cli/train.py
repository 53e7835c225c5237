"""Train a PPO policy that picks (k, tau) for every speculative iteration, and export it.

With no options, on the embedded default pair: calibrates this machine's latency (cached), loads
the shipped traces, trains PPO over a mix of scenarios on train traces, each episode priced by a
machine drawn from the latency family, keeps the checkpoint with the best worst ratio to the
rules on validation traces, exports it into the run folder (<run>/policy), then reports the
comparison on test traces (simulator) and a paired check in the real loop.

    specrl train                                               # the default run
    specrl train --total-timesteps 20000 --scenarios code --export-as mine   # short, on one scenario
    specrl train -p learning_rate:0.001 -p n_envs:64          # any ppo: or train: key
    specrl train --latency-profiles machine                    # this machine's prices only
    specrl train --resume runs/<run>                           # continue an interrupted run

TensorBoard: tensorboard --logdir runs. Ctrl-C (or SIGTERM) saves a checkpoint.
"""

from __future__ import annotations

import argparse
import sys

from specrl.cli import options_of
from specrl.training.options import (
    FAMILY,
    MACHINE,
    REAL_ENVS,
    OptionError,
    TrainOptions,
    parse_hyperparameter,
)

HELP = "train a PPO policy and export it into its run folder"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``specrl train``'s options: one per :class:`~specrl.training.options.TrainOptions` field."""
    d = TrainOptions()
    what = parser.add_argument_group("what to train on")
    what.add_argument(
        "--scenarios", nargs="+", default=d.scenarios, help="training scenarios (names or YAML)"
    )
    what.add_argument(
        "--preset", default=d.preset, help="embedded pair instead of the scenarios' (small, tiny)"
    )
    what.add_argument(
        "--train-on",
        choices=("replay", "real"),
        default=d.train_on,
        help="replay: the trace-replay simulator (default); real: the real loop on train prompts (slow)",
    )
    what.add_argument(
        "--subproc", action="store_true", help="with --train-on real: each env in its own process"
    )
    what.add_argument(
        "--latency-profiles",
        nargs="+",
        default=d.latency_profiles,
        metavar="PROFILE",
        help=f"machines episodes are priced by: '{FAMILY}' (the shipped family; default), '{MACHINE}' "
        "(this machine's calibration alone) or profile names (specrl.latency.family)",
    )
    what.add_argument(
        "--perturbations", type=int, default=d.perturbations, help="perturbed models per profile (default 6)"
    )
    what.add_argument(
        "--select-profiles",
        nargs="+",
        default=d.select_profiles,
        metavar="PROFILE",
        help="profiles checkpoint selection scores under (default: the family's selection profiles)",
    )
    ppo = parser.add_argument_group("PPO")
    ppo.add_argument("--config", default=d.config, help="hyperparameter YAML (ppo: and train: sections)")
    ppo.add_argument(
        "-p",
        "--hyperparameter",
        dest="hyperparameters",
        action="append",
        default=[],
        metavar="KEY:VALUE",
        help="override a key of the YAML's ppo: or train: section (repeatable; values read as YAML)",
    )
    ppo.add_argument(
        "--total-timesteps", type=int, default=d.total_timesteps, help="env steps (0: warm start)"
    )
    ppo.add_argument(
        "--n-envs", type=int, default=d.n_envs, help=f"parallel episodes (real loop: {REAL_ENVS} at most)"
    )
    ppo.add_argument("--eval-freq", type=int, default=d.eval_freq, help="env steps between validations")
    ppo.add_argument(
        "--kl-to-clone", type=float, default=d.kl_to_clone, help="penalty per nat from the clone"
    )
    ppo.add_argument(
        "--warm-start",
        action=argparse.BooleanOptionalAction,
        default=d.warm_start,
        help="start from a clone of the best rule on validation (default)",
    )
    ppo.add_argument(
        "--no-stop", dest="stop", action="store_false", help="no per-token stop dimension (actions k, tau)"
    )
    ppo.add_argument("--seed", type=int, default=d.seed, help="seed of PPO and the simulators")
    ppo.add_argument("--device", default=d.device, help="device of the PPO networks (cpu)")
    report = parser.add_argument_group("selection and report")
    report.add_argument(
        "--select-scenarios",
        nargs="*",
        default=d.select_scenarios,
        help="scenarios checkpoint selection also scores on (validation traces; default: the embedded "
        "domains when training on shipped scenarios, else only the training ones)",
    )
    report.add_argument(
        "--eval-scenarios",
        nargs="*",
        default=d.eval_scenarios,
        help="also reported on test traces (default: the embedded domains and the unseen license, when "
        "training on shipped scenarios)",
    )
    report.add_argument(
        "--validate-scenarios",
        nargs="*",
        default=d.validate_scenarios,
        help="checked in the real loop (default: code prose math prose_t1 when training on shipped "
        "scenarios, else the training ones; none: skip)",
    )
    report.add_argument(
        "--validate-prompts", type=int, default=d.validate_prompts, help="test prompts per domain"
    )
    report.add_argument("--validate-repeats", type=int, default=d.validate_repeats, help="real-loop repeats")
    report.add_argument("--sim-repeats", type=int, default=d.sim_repeats, help="acceptance draws per trace")
    out = parser.add_argument_group("output")
    out.add_argument("--runs-dir", default=d.runs_dir, help="folder of run folders (default runs)")
    out.add_argument("--exp-name", default=d.exp_name, help="experiment name in the run folder's name")
    out.add_argument(
        "--export-as",
        default=d.export_as,
        metavar="NAME",
        help="also export as NAME under $SPECRL_HOME/policies (LearnedController.load(NAME)), or to a "
        "folder path; never replaces a shipped policy",
    )
    out.add_argument(
        "--resume", default=d.resume, metavar="RUN_DIR", help="continue the run saved in RUN_DIR"
    )


def options_from(args: argparse.Namespace, parser: argparse.ArgumentParser) -> TrainOptions:
    """The parsed options as :class:`TrainOptions`, checked (``parser.error`` names a bad one)."""
    fields = options_of(args)
    try:
        fields["hyperparameters"] = dict(parse_hyperparameter(item) for item in fields["hyperparameters"])
        options = TrainOptions(**fields)
        options.check()
    except OptionError as error:
        parser.error(str(error))
    return options


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    options = options_from(args, parser)
    from specrl.train import train
    from specrl.training.ppo_run import interrupt_on_signals

    interrupt_on_signals()
    try:
        train(options, args.command_line)
    except ValueError as error:  # OptionError, ScenarioError, PolicyError: each names its fix
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0  # interrupted too: the checkpoint is saved and the message says how to resume
