"""Side-by-side evaluation of controllers (``specrl evaluate``) and the primitives of every
comparison: :mod:`~specrl.evaluation.roster` (controllers by name, episode plans),
:mod:`~specrl.evaluation.compare` (the one real-loop comparison loop, paired ratios),
:mod:`~specrl.evaluation.intervals` (their 95% intervals), :mod:`~specrl.evaluation.records`
(timed run records), :mod:`~specrl.evaluation.harness` (one scenario, every row),
:mod:`~specrl.evaluation.run_all` and :mod:`~specrl.evaluation.report` (a run's record and files).
"""

from specrl.evaluation.harness import Settings, evaluate_scenario, load_policies
from specrl.evaluation.roster import Episode, episode_plan, make_controller

__all__ = ["Episode", "Settings", "episode_plan", "evaluate_scenario", "load_policies", "make_controller"]
