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
from specrl.training.options import OptionError, TrainOptions, parse_hyperparameter
from specrl.training.options import add_arguments as add_arguments  # one option per TrainOptions field

HELP = "train a PPO policy and export it into its run folder"


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
