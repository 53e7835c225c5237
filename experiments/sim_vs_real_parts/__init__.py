"""What ``experiments/sim_vs_real.py`` measures: the fidelity of the trace-replay simulator, the
same controllers on the same test episodes in the simulator and in the real loop.

- :mod:`.real_loop`: the controllers, and their real episodes priced by the wall clock and by the
  latency model on the very same steps;
- :mod:`.rows`: one scenario's rows (simulator, real modeled, wall clock, profiled baseline);
- :mod:`.gaps`: what the rows say: the largest gaps, their level and shape, the machine's own
  noise, whether the simulator orders the controllers as the real loop does;
- :mod:`.page`: the markdown page of a run's JSON.
"""

from sim_vs_real_parts.gaps import gap, machine_noise, rankings, summarize, worst_gaps
from sim_vs_real_parts.page import render
from sim_vs_real_parts.real_loop import CONTROLLERS, SPLIT
from sim_vs_real_parts.rows import scenario_rows

__all__ = [
    "CONTROLLERS",
    "SPLIT",
    "gap",
    "machine_noise",
    "rankings",
    "render",
    "scenario_rows",
    "summarize",
    "worst_gaps",
]
