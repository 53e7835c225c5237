"""Where each row's tokens sit in a batch's KV cache: the slot grid's rules, on token counts.

:class:`~specrl.engine.cache.KVCache` applies them to its keys and values, and the batch
simulator (:class:`~specrl.envs.batch_replay.BatchReplayEnv`) prices its steps at the width they
give, so the two cannot drift apart. A row's rejected proposals and a joined row's padding are
holes that attention still reads. :meth:`SlotGrid.step` and :meth:`SlotGrid.admit` are what a
speculative step and a prefill do to the grid: the simulator's way in (tested against the cache).
"""

from __future__ import annotations

COMPACT_AT = 0.5  # pack a grid when holes take more than this share of its slots


class SlotGrid:
    """Each row's slots (the column of each of its tokens, in order) and the grid's width."""

    def __init__(self, rows: int = 0) -> None:
        self.slots_of: list[list[int]] = [[] for _ in range(rows)]
        self.width = 0  # columns in use, holes included

    @property
    def rows(self) -> int:
        return len(self.slots_of)

    @property
    def lengths(self) -> list[int]:
        """Each row's tokens."""
        return [len(slots) for slots in self.slots_of]

    def holes(self) -> float:
        """The share of the grid's slots that are holes (0 when empty)."""
        rows = self.slots_of
        if not self.width or not rows:
            return 0.0
        return 1.0 - sum(map(len, rows)) / (len(rows) * self.width)

    def used_width(self) -> int:
        """The columns up to every row's last token (the tail beyond is holes in every row)."""
        return max((slots[-1] + 1 for slots in self.slots_of if slots), default=0)

    def dense(self, width: int | None = None) -> bool:
        """Whether every row fills ``width`` columns (default: the grid's), i.e. there is no hole."""
        width = self.width if width is None else width
        return all(len(slots) == width for slots in self.slots_of)

    def feed(self, n: int, counts: list[int] | None = None) -> int:
        """Append ``n`` columns, row r's first ``counts[r]`` real (default: all); return the first
        new column."""
        before = self.width
        for slots, count in zip(self.slots_of, counts or [n] * self.rows, strict=True):
            slots.extend(range(before, before + count))
        self.width = before + n
        return before

    def rollback(self, lengths: list[int]) -> bool:
        """Keep the first ``lengths[r]`` tokens of every row r (a row already shorter is left alone)
        and cut the tail no row uses; True if any row lost a token."""
        cut = False
        for slots, length in zip(self.slots_of, lengths, strict=True):
            if len(slots) > length:
                del slots[length:]
                cut = True
        if cut:
            self.cut(self.used_width())
        return cut

    def cut(self, width: int) -> None:
        """Drop the columns from ``width`` on (holes in every row)."""
        self.width = min(self.width, width)

    def select(self, rows: list[int]) -> None:
        """Keep only ``rows`` (indices, in their new order) and cut the tail no row uses."""
        self.slots_of = [self.slots_of[r] for r in rows]
        self.cut(self.used_width())

    def join(self, other: SlotGrid) -> None:
        """Append ``other``'s rows after this grid's (an empty grid takes ``other``'s width)."""
        self.width = max(self.width, other.width) if self.rows else other.width
        self.slots_of = self.slots_of + [list(slots) for slots in other.slots_of]

    def pack(self) -> list[list[int]]:
        """Move each row's tokens to the left; return, per row, the old slot of each new column
        up to the new width (a row with fewer tokens repeats its last slot)."""
        width = max(self.lengths, default=0)
        order = [slots + [slots[-1] if slots else 0] * (width - len(slots)) for slots in self.slots_of]
        self.slots_of = [list(range(len(slots))) for slots in self.slots_of]
        self.width = width
        return order

    def step(self, fed: int, kept: list[int]) -> None:
        """A speculative step on counts alone: ``fed`` columns fed to every row (its last token and
        the proposals, right-padded), of which row r keeps its first ``kept[r]``. The same grid
        as :meth:`feed` then :meth:`rollback` leave (tested), in one pass: a simulator's hot path."""
        width = self.width
        for slots, count in zip(self.slots_of, kept, strict=True):
            slots.extend(range(width, width + count))
        most = max(kept, default=0)
        # the columns after the longest kept are holes in every row: cut, as rollback cuts them
        self.width = width + most if most else (width if fed == 0 else self.used_width())

    def admit(self, prefix_lengths: list[int]) -> None:
        """Rows holding ``prefix_lengths`` tokens join: prefilled together, right-padded to the
        longest (nothing fed when all are empty), then joined after this grid's rows."""
        joining = SlotGrid(len(prefix_lengths))
        if any(prefix_lengths):
            joining.feed(max(prefix_lengths), list(prefix_lengths))
        self.join(joining)
