"""Train a batch-aware PPO policy in the batch simulator and export it
(:func:`specrl.batch_control.train.train_batch`; docs/design.md, "Batches").

Imitation of the clairvoyant labels (``--imitation-rounds``), then PPO (``--timesteps``), on the
train traces of fixed batches and the arrivals load; checkpoints are selected on validation
against the batch-size schedule tuned there. Episodes are priced by the family of batch latency
models unless ``--latency-profiles machine``. Report on test prompts in the real loop with
``python experiments/batch_real.py --policy <folder>``.

    python experiments/train_batch.py                                       # <run folder>/policy
    python experiments/train_batch.py --out specrl/policies/batch           # rebuild the shipped one
    python experiments/train_batch.py --imitation-rounds 1 --timesteps 20000  # smoke
"""

from __future__ import annotations

import argparse
import dataclasses

from specrl.batch_control.train import BatchTrainOptions, train_batch
from specrl.provenance import command_line
from specrl.training.inputs import check_latency_profile_arguments
from specrl.training.options import PROFILE_OPTIONS, add_arguments

HELP = {
    "timesteps": "PPO env steps over all envs",
    "imitation_rounds": "DAgger rounds before PPO (0: none)",
    "imitation_episodes": "train episodes per scenario a round",
    "label_horizon": "steps an imitation label plays out",
    "label_every": "label one visited state in this many",
    "eval_freq": "env steps between validations",
    "episodes": "validation episodes per scenario",
    "out": "policy folder (default: <run folder>/policy)",
    "runs_dir": "where the run folder goes",
    "fixed": "fixed-batch scenarios",
    "arrivals": "arrivals scenarios",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for field in dataclasses.fields(BatchTrainOptions):
        if field.name in PROFILE_OPTIONS:
            continue
        default = BatchTrainOptions().__dict__[field.name]
        flag = "--" + field.name.replace("_", "-")
        if isinstance(default, list):
            parser.add_argument(flag, nargs="*", default=default, help=HELP.get(field.name))
        else:
            kind = int if isinstance(default, int) else str
            parser.add_argument(flag, type=kind, default=default, help=HELP.get(field.name))
    add_arguments(parser, PROFILE_OPTIONS)
    args = parser.parse_args(argv)
    check_latency_profile_arguments(parser, args, batch=True)
    return args


def main(argv: list[str] | None = None) -> None:
    train_batch(BatchTrainOptions(**vars(parse_args(argv))), command_line())


if __name__ == "__main__":
    main()
