"""How far a held-out machine's price features sit from what a run's observation normalizer saw.

A policy sees its features standardised by the ``VecNormalize`` statistics of its run (baked into
the export). A feature whose training values hardly varied has a tiny standard deviation, so a
machine with another value there reaches the normaliser's clip (10 standard deviations) and the
network sees an input it never met. Prints, per profile, the standardised price features (33 on) of
an episode's first observation.

    python experiments/normalizer_reach.py runs/<run>/best_vecnormalize.pkl
"""

from __future__ import annotations

import argparse
import pickle

import numpy as np

from specrl.features import FEATURE_NAMES, FeatureTracker, GenerationSettings
from specrl.latency import HELD_OUT
from specrl.latency.family import profiles
from specrl.tables import markdown_table
from specrl.training.inputs import SELECT_PROFILES

FIRST = FEATURE_NAMES.index("draft_price")
CLIP = 10.0  # VecNormalize's default clip_obs


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "normalizer", help="a run's vecnormalize.pkl (best_vecnormalize.pkl: the kept checkpoint's)"
    )
    args = parser.parse_args()
    with open(args.normalizer, "rb") as file:
        statistics = pickle.load(file).obs_rms
    width = len(statistics.mean)
    known = profiles()
    settings = GenerationSettings(max_new_tokens=128, context_window=2048, vocab_size=512)
    rows = []
    for name in (*HELD_OUT, *SELECT_PROFILES):
        vector = FeatureTracker(settings, 200, prices=known[name].price_line).vector()[:width]
        z = np.clip((vector - statistics.mean) / np.sqrt(statistics.var + 1e-8), -CLIP, CLIP)
        rows.append([name, *(f"{value:+.1f}" for value in z[FIRST:])])
    rows.append(["(std seen)", *(f"{value:.3f}" for value in np.sqrt(statistics.var[FIRST:]))])
    print(markdown_table(["profile", *FEATURE_NAMES[FIRST:width]], rows))


if __name__ == "__main__":
    main()
