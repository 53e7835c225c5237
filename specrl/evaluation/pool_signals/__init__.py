"""What ``experiments/pool_signals.py`` measures: how much of the clairvoyant oracle's room over the
best static setting a drafter-pool controller can take from signals it computes from the text
alone, in the simulator.

- :mod:`.signals`: the signals at every position of a trace (n-gram order, copy run, short match);
- :mod:`.table_policy`: a table policy over them (one action per signal value), fit by
  Dinkelbach's iteration and scored on a split's traces and acceptance draws;
- :mod:`.analysis`: one scenario: the bounds and every signal set's table, fit out of and in sample;
- :mod:`.page`: the markdown page.
"""

from specrl.evaluation.pool_signals.analysis import analyse
from specrl.evaluation.pool_signals.page import render
from specrl.evaluation.pool_signals.signals import SIGNAL_SETS, text_signals
from specrl.evaluation.pool_signals.table_policy import Split, fit_table

__all__ = ["SIGNAL_SETS", "Split", "analyse", "fit_table", "render", "text_signals"]
