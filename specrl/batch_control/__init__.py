"""Batch-aware control in the batch simulator: the rules a serving engineer tunes (the batch-size
schedule, the switch above a batch size), the clairvoyant labels, and the imitation that trains
the batch policy from them.

- :mod:`~specrl.batch_control.schedule`: a controller's throughput, the schedule and the cut-off, tuned
  on validation.
- :mod:`~specrl.batch_control.oracles`: the one-step and rollout oracles (a bound; labels).
- :mod:`~specrl.batch_control.imitation`: DAgger toward the labels, the validation callback.

``imitation`` needs stable-baselines3 and torch; import it by its own name.
"""

from specrl.batch_control.oracles import OneStepOracle, RolloutOracle, clairvoyant, oracle_rates
from specrl.batch_control.schedule import (
    ARRIVALS,
    FIXED,
    EpisodeTally,
    batch_of,
    controller_throughput,
    cutoff_from,
    play_episode,
    play_episodes,
    pooled_throughput,
    rates_by_batch,
    tune_cutoff,
    tune_schedule,
    with_cutoff,
)

__all__ = [
    "FIXED",
    "ARRIVALS",
    "OneStepOracle",
    "RolloutOracle",
    "batch_of",
    "clairvoyant",
    "cutoff_from",
    "oracle_rates",
    "rates_by_batch",
    "controller_throughput",
    "EpisodeTally",
    "play_episode",
    "play_episodes",
    "pooled_throughput",
    "tune_cutoff",
    "tune_schedule",
    "with_cutoff",
]
