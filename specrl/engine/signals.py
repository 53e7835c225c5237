"""The draft's per-position signals (confidence max q, entropy of q), kept on the device: read at
once only when the action's cut needs them (:attr:`Action.needs_signals`), else once per step
(docs/design.md, "Host reads"; ``tests/test_host_reads.py`` counts the reads).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from specrl.engine.sampling import entropy
from specrl.engine.types import Action


class DraftSignals:
    """The signals of one step's drafted positions, for rows drafting together ((B, V) laws).

    ``halts(positions, q, active)``: per row, whether its action stops drafting before the token
    drawn from ``q`` (all False, without a read, when no action needs signals); ``action`` is one
    for every row or one per row. Only the ``active`` rows' signals are recorded. ``read()``:
    every row's confidences and entropies, position by position, as host floats.
    """

    def __init__(self, action: Action | Sequence[Action], rows: int = 1) -> None:
        self.actions = [action] * rows if isinstance(action, Action) else list(action)
        if len(self.actions) != rows:
            raise ValueError(
                f"give one action for every row or one per row: {len(self.actions)} for {rows} rows"
            )
        self.rows = rows
        self.eager = any(a.needs_signals for a in self.actions)
        self.device_values: list[torch.Tensor] = []  # (2, B) per call, not read yet
        self.host_values: list[list[list[float]]] = []  # [confidences, entropies] per call, read
        self.active: list[list[bool] | None] = []  # per call, the rows it looked at (None: all)

    def halts(
        self, positions: int | list[int], q: torch.Tensor, active: list[bool] | None = None
    ) -> list[bool]:
        values = torch.stack([q.max(-1).values, entropy(q)])  # (2, B), on the device
        self.active.append(None if active is None else list(active))  # the caller goes on to change its own
        if not self.eager:
            self.device_values.append(values)
            return [False] * q.shape[0]
        confidences, entropies = values.tolist()  # the one read this position costs
        self.host_values.append([confidences, entropies])
        if isinstance(positions, int):
            positions = [positions] * q.shape[0]
        return [
            (active is None or active[r]) and self.actions[r].halts(positions[r], c, h)
            for r, (c, h) in enumerate(zip(confidences, entropies, strict=True))
        ]

    def read(self) -> tuple[list[list[float]], list[list[float]]]:
        """(confidences, entropies), each [row][position], as host floats; one read for the
        positions still on the device."""
        if self.device_values:
            self.host_values += torch.stack(self.device_values).tolist()
            self.device_values = []
        confidences: list[list[float]] = [[] for _ in range(self.rows)]
        entropies: list[list[float]] = [[] for _ in range(self.rows)]
        for (c, h), active in zip(self.host_values, self.active, strict=True):
            for r in range(self.rows):
                if active is None or active[r]:
                    confidences[r].append(c[r])
                    entropies[r].append(h[r])
        return confidences, entropies
