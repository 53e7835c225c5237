"""Batch-aware control in the batch simulator: the rules a serving engineer tunes (the batch-size
schedule, the switch above a batch size, :mod:`~specrl.batch_control.schedule`) and the imitation
that trains the batch policy from the oracle's labels (:mod:`~specrl.batch_control.imitation`,
which needs stable-baselines3 and torch: import it by its own name). Controllers are scored in
the batch simulator with :mod:`specrl.trace_evaluation`; the oracle is :mod:`specrl.oracle`'s.
"""

from specrl.batch_control.schedule import (
    ARRIVALS,
    FIXED,
    batch_of,
    cutoff_from,
    tune_cutoff,
    tune_schedule,
    with_cutoff,
)

__all__ = ["ARRIVALS", "FIXED", "batch_of", "cutoff_from", "tune_cutoff", "tune_schedule", "with_cutoff"]
