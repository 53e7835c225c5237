"""The signals a drafter-pool controller can compute from the text alone, before each step, at
every generated position of a trace:

- ``order``: the length (3, 2, 1; 0 without a match) of the longest tail of the text that occurred
  earlier, the n-gram the lookup proposes from;
- ``run``: over how many of the latest positions (capped at :data:`RUN_CAP`) the lookup's first
  token was the one the target then emitted (the text is copying a passage);
- ``short``: the lookup can propose fewer than k_max tokens (its match ends just before the tail).
"""

from __future__ import annotations

import torch

from specrl.engine.drafters.ngram import NGramIndex
from specrl.envs.scenario import Scenario
from specrl.models import ModelPair
from specrl.traces import TraceSet
from specrl.traces.analysis import rebuilt_prompt

#: The signal sets a table policy is fit on, by label.
SIGNAL_SETS = {
    "order": ("order",),
    "order + run": ("order", "run"),
    "order + run + short": ("order", "run", "short"),
}
RUN_CAP = 4


def text_signals(traces: TraceSet, scenario: Scenario, pair: ModelPair) -> list[list[dict[str, int]]]:
    """Per trace and generated position, the signals a step starting there can see."""
    prompts = scenario.with_overrides(split=traces.meta["split"]).prompt_sets(pair)
    k_max = traces.k_max
    signals = []
    for trace in traces.traces:
        segment, prompt = rebuilt_prompt(trace, prompts, pair)
        text = torch.tensor(prompt + segment.tokens)
        lookup, fields = NGramIndex(), segment.fields("ngram")
        rows, run = [], 0
        for j in range(segment.end):
            available, order = lookup.found(text[: segment.prompt_length + j])
            if available != fields.available[j]:
                raise SystemExit(f"error: the lookup disagrees with the trace's at position {j}; recollect")
            if j:
                run = min(RUN_CAP, run + 1) if fields.match[j - 1] else 0
            rows.append({"order": order, "run": run, "short": int(0 < available < k_max)})
        signals.append(rows)
    return signals
