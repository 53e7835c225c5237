"""k by batch size: the schedule vLLM (``num_speculative_tokens_per_batch_size``) and TensorRT-LLM
(``draft_len_schedule``) ship for batched speculation, e.g. ``{4: 4, 8: 2, 32: 1}``: 4 draft
tokens up to batch 4, 2 up to 8, 1 up to 32, none above; and vLLM's
``speculative_disable_by_batch_size``, the cut-off alone over any controller. They are tuned in
:mod:`specrl.batch_control.schedule`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from specrl.engine.types import Action, StepResult
from specrl.features import BATCH_LOG2_NORM, FEATURE_NAMES

BATCH_FEATURE = FEATURE_NAMES.index("batch_size")


def batch_size_of(observation: Any) -> int:
    """The number of rows an observation's ``batch_size`` feature says the batch holds."""
    return max(1, round(2 ** (float(observation[BATCH_FEATURE]) * BATCH_LOG2_NORM)))


class BatchScheduleController:
    """Drafts ``schedule[b]`` tokens at batch sizes up to ``b`` (the smallest such ``b``); 0 above
    the largest. The batch size is read from the observation's ``batch_size`` feature."""

    def __init__(self, schedule: Mapping[int, int], tau: float = 0.0) -> None:
        if not schedule:
            raise ValueError(
                "the schedule is empty: give {largest batch size: k, ...}, e.g. {4: 4, 8: 2, 32: 1}"
            )
        for bound, k in schedule.items():
            if not (isinstance(bound, int) and bound >= 1 and isinstance(k, int) and k >= 0):
                raise ValueError(f"a schedule maps batch sizes >= 1 to k >= 0, got {bound!r}: {k!r}")
        self.schedule = dict(sorted(schedule.items()))
        self.actions = {bound: Action(k, tau) for bound, k in self.schedule.items()}
        self.off = Action(0, tau)

    def action_at(self, batch_size: int) -> Action:
        return next((a for bound, a in self.actions.items() if batch_size <= bound), self.off)

    def reset(self) -> None:
        """Nothing to forget: the schedule has no state."""

    def act(self, observation: Any) -> Action:
        return self.action_at(batch_size_of(observation))

    def observe(self, result: StepResult) -> None:
        """Ignores outcomes by design."""

    def __repr__(self) -> str:
        return f"BatchScheduleController({self.schedule})"


class BatchCutoffController:
    """``controller``'s actions up to ``max_batch`` rows, plain decoding above (vLLM's
    ``speculative_disable_by_batch_size``). Every step's outcome still reaches ``controller``, so
    a controller that keeps a window of outcomes sees the whole run."""

    def __init__(self, controller: Any, max_batch: int) -> None:
        if not (isinstance(max_batch, int) and max_batch >= 1):
            raise ValueError(f"max_batch is the largest batch that speculates, >= 1; got {max_batch!r}")
        self.controller, self.max_batch = controller, max_batch

    def reset(self) -> None:
        self.controller.reset()

    def act(self, observation: Any) -> Action:
        action = self.controller.act(observation)  # asked every step, as without the switch
        return action if batch_size_of(observation) <= self.max_batch else Action(0)

    def observe(self, result: StepResult) -> None:
        self.controller.observe(result)

    def __repr__(self) -> str:
        return f"BatchCutoffController({self.controller!r}, max_batch={self.max_batch})"
