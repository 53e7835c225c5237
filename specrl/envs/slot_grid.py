"""The width of a batch's KV cache grid, tracked from token counts as the engine lays it out.

A batched cache (:class:`~specrl.engine.cache.KVCache`) is a grid of slots shared by
the rows, and attention reads all of it: a row's rejected proposals and a joined row's padding
are holes that still cost. The batch simulator prices a step at the grid's width, so it follows
the same rules as the engine, on counts alone:

- admitted prompts are prefilled together, right-padded: their caches hold all but their last
  token, on as many slots as the longest holds; joining a running batch widens the narrower grid;
- a step feeds every row at the grid's end and keeps, of row r's new slots, its ``emitted[r]``
  tokens (its last token and its accepted proposals); the tail that no row uses is cut;
- finished rows leave, and the tail no row uses is cut;
- when holes exceed ``COMPACT_AT`` of the grid, every row is packed to the left.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from specrl.engine.cache import COMPACT_AT


class SlotGrid:
    """Each row's valid tokens and the end of its last one, and the grid's width (the module doc)."""

    def __init__(self) -> None:
        self.lengths: dict[int, int] = {}
        self.ends: dict[int, int] = {}
        self.width = 0

    def admit(self, prompt_lengths: Mapping[int, int]) -> None:
        """Rows (id -> prompt tokens) join the batch, or start it when it is empty."""
        held = {row: length - 1 for row, length in prompt_lengths.items()}
        padded = max(held.values(), default=0)
        self.width = max(self.width, padded) if self.lengths else padded
        self.lengths.update(held)
        self.ends.update(held)

    def step(self, emitted: Mapping[int, int]) -> None:
        """Every row fed at the grid's end keeps ``emitted[row]`` new tokens."""
        for row, kept in emitted.items():
            self.lengths[row] += kept
            self.ends[row] = self.width + kept
        self._cut()

    def leave(self, rows: Iterable[int]) -> None:
        """Finished rows leave the batch."""
        for row in rows:
            del self.lengths[row], self.ends[row]
        self._cut()

    def compact(self) -> bool:
        """Pack every row to the left if holes exceed ``COMPACT_AT`` of the grid; True if it did."""
        if not self.width or 1 - sum(self.lengths.values()) / (len(self.lengths) * self.width) <= COMPACT_AT:
            return False
        self.ends = dict(self.lengths)
        self.width = max(self.lengths.values())
        return True

    def _cut(self) -> None:
        self.width = max(self.ends.values(), default=0)
