"""The main job: train a PPO policy on the embedded pair and export it (``specrl train``).

    python experiments/train_ppo.py            # the same as: specrl train
    python experiments/train_ppo.py --help     # every option

The run folder (runs/<scenario>__<exp>__<seed>__<time>/) holds TensorBoard's events, the
checkpoints, the exported policy (policy/) and the report (results.md); see specrl/cli/train.py.
"""

import sys

from specrl.cli import main

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))
