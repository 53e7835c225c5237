"""What ``experiments/gpu_check.py`` runs: one GPU, about six minutes, is specrl lossless there and
what does speculation buy on it. The script parses its flags and calls these in order:

- :mod:`.budgets`: every budget of a GPU run and of ``--smoke``, and the flags that override them;
- :mod:`.record`: the run's stages in order, each timed, and the JSON written after each;
- :mod:`.stages`: the stages that run in this process (environment, lossless, build, calibrate);
- :mod:`.script_stages`: the stages that run a script of ``experiments/`` (policy, benchmark,
  bench-compile);
- :mod:`.page`: the summary page, ``gpu_check.md``.
"""

from specrl.evaluation.gpu_check.budgets import AIM_SECONDS, BUDGETS, resolve_budget
from specrl.evaluation.gpu_check.record import Record
from specrl.evaluation.gpu_check.stages import require_device

__all__ = ["AIM_SECONDS", "BUDGETS", "Record", "require_device", "resolve_budget"]
