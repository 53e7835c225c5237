"""Host reads in the engine's inner loop: on a GPU each one waits for every queued kernel.

The engine reads a drafted position's signals to the host only when the action's cut needs them
(tau > 0 or a stop rule), and everything else once per step. Counted here on the CPU by
intercepting every tensor-to-host conversion (``item``, ``tolist``, ``int()``, ``bool()``...),
inside transformers' forwards too: the counts would be the device syncs of the same code on CUDA.
"""

from __future__ import annotations

import dataclasses

import pytest
from conftest import prompts
from torch.overrides import TorchFunctionMode

import specrl
from specrl.engine.generation import Generation
from specrl.engine.sampling import SamplingConfig
from specrl.models import CacheSettings

READS = {"item", "tolist", "__bool__", "__int__", "__float__", "__index__", "numpy", "cpu"}


class HostReads(TorchFunctionMode):
    """Counts the tensor-to-host conversions made while it is active."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", None) in READS:
            self.count += 1
        return func(*args, **(kwargs or {}))


def reads_of_one_step(make, action: specrl.Action) -> tuple[int, int]:
    """(host reads, draft forwards) of a generation's second step (the first warms the caches)."""
    generation = make()
    generation.step(action)
    with HostReads() as reads:
        step = generation.step(action)
    return reads.count, max(result.draft_forwards for result in step.results)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("engine", ["dynamic", "static", "batched"])
def test_reads_per_step_do_not_grow_with_k_unless_the_cut_needs_each_tokens_signals(
    close_pair, temperature, engine
):
    prompt_ids = [p[: 4 + 3 * i] for i, p in enumerate(prompts(3, close_pair.vocab_size, seed=5))]
    sampling = SamplingConfig(temperature)
    batched = engine == "batched"
    pair = dataclasses.replace(close_pair, cache=CacheSettings(engine)) if engine == "static" else close_pair

    def make():
        rows = prompt_ids if batched else prompt_ids[2:]  # a single sequence is a batch of one
        return Generation(pair, rows, 40, sampling, seed=1, stop_at_eos=False)

    free = {k: reads_of_one_step(make, specrl.Action(k)) for k in (1, 2, 6)}
    assert all(forwards == k for k, (_, forwards) in free.items())  # k positions drafted, no cut
    assert len({count for count, _ in free.values()}) == 1  # the same reads whatever k: none per token
    per_step = free[1][0]
    assert per_step <= 2, per_step
    # a cut that never fires (tau below any confidence) still reads each position: the step's one
    # read of the signals becomes one read per position
    for k in (2, 6):
        count, forwards = reads_of_one_step(make, specrl.Action(k, tau=1e-9))
        assert forwards == k and count == per_step - 1 + forwards
    # a stop rule reads them too; deciding costs no further read
    count, forwards = reads_of_one_step(make, specrl.Action(6, stop=lambda position, c, h: position == 3))
    assert forwards == 4 and count == per_step - 1 + forwards
