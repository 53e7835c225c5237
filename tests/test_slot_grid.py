"""The batch simulator drives the engine's slot grid on counts alone (admit prompt lengths, step by
tokens fed and kept, rows leaving, packing): after every admission and every step, with rows of
ragged acceptance joining and leaving, its width equals the real cache's."""

from __future__ import annotations

import numpy as np

from specrl.engine.generation import Generation
from specrl.engine.grid import COMPACT_AT, SlotGrid
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action


def test_the_grid_width_follows_the_engines_cache(pair):
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, pair.vocab_size, rng.integers(1, 30)).tolist() for _ in range(9)]
    budgets = [int(b) for b in rng.integers(3, 20, size=len(prompts))]
    generation = Generation(pair, prompts[:3], 20, SamplingConfig(0.0), stop_at_eos=False)
    generation.budgets[:3] = budgets[:3]
    grid = SlotGrid()
    grid.admit([len(prompts[row]) - 1 for row in range(3)])  # the caches hold all but the last token
    assert grid.width == generation.target.slots
    waiting, widths, compacted = list(range(3, len(prompts))), set(), 0
    for step_index in range(200):
        if generation.done and not waiting:
            break
        if generation.batch_size < 4 and waiting:
            joining = waiting[:2]
            waiting = waiting[2:]
            rows = generation.add([prompts[i] for i in joining], max_new_tokens=budgets[joining[0]])
            assert len(rows) == len(joining)
            grid.admit([len(prompts[i]) - 1 for i in joining])
            assert grid.width == generation.target.slots
        step = generation.step(Action([0, 2, 5, 3][step_index % 4]))
        grid.step(max(r.proposed for r in step.results) + 1, [r.emitted for r in step.results])
        grid.select([i for i, row in enumerate(step.rows) if row not in step.finished])
        if grid.holes() > COMPACT_AT:
            grid.pack()
            compacted += 1
        if not generation.done:  # an emptied batch keeps its old caches until prompts start a new one
            assert grid.width == generation.target.slots, step_index
        widths.add(grid.width)
    assert generation.done and not waiting
    assert len(widths) > 10, widths
    assert compacted  # the test saw the grid packed


def test_a_step_on_counts_leaves_the_grid_feed_then_rollback_leave():
    rng = np.random.default_rng(1)
    for _ in range(200):
        rows = int(rng.integers(1, 5))
        fast, slow = SlotGrid(), SlotGrid()
        prefixes = [int(n) for n in rng.integers(0, 6, rows)]
        fast.admit(prefixes)
        slow.admit(prefixes)
        for _ in range(int(rng.integers(1, 6))):
            fed = int(rng.integers(0, 5))
            kept = [int(k) for k in rng.integers(0, fed + 1, rows)]
            fast.step(fed, kept)
            lengths = slow.lengths
            slow.feed(fed)
            slow.rollback([length + count for length, count in zip(lengths, kept, strict=True)])
            assert (fast.width, fast.slots_of) == (slow.width, slow.slots_of), (prefixes, fed, kept)
