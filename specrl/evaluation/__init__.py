"""Side-by-side evaluation of controllers: simulator and real loop, bounds, reports.

``specrl evaluate`` is the command; the pieces:

- :mod:`~specrl.evaluation.roster`: controllers by name, held-out episode plans;
- :mod:`~specrl.evaluation.compare`: the one real-loop comparison loop (every script's), paired ratios;
- :mod:`~specrl.evaluation.runs`: playing episodes (ours and HF ``generate``), aggregating rows;
- :mod:`~specrl.evaluation.simulator`: trace replay, the oracle and the static grid;
- :mod:`~specrl.evaluation.harness`: one scenario, every row, side by side;
- :mod:`~specrl.evaluation.real_loop_check`: a trained policy against the bar in the real loop
  (``specrl train``'s step 4, through the harness);
- :mod:`~specrl.evaluation.report`: results.json / results.md / TensorBoard;
- :mod:`~specrl.evaluation.scenario_choice`, :mod:`~specrl.evaluation.run_all`: the scenarios of a
  run with the command line's overrides, and every one of them into one record and its files;
- :mod:`~specrl.evaluation.machine`: where and how a run ran;
- :mod:`~specrl.evaluation.records`: timed run records: speeds per repeat, medians, paired ratios,
  outputs equal to a reference (what the benchmark scripts under ``experiments/`` pair);
"""

from specrl.evaluation.harness import Settings, evaluate_scenario, load_policies
from specrl.evaluation.roster import Episode, episode_plan, make_controller

__all__ = ["Episode", "Settings", "episode_plan", "evaluate_scenario", "load_policies", "make_controller"]
