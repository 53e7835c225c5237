"""The draft's per-position signals (confidence max q, entropy of q), kept on the device.

A host read of a device value waits for every kernel queued before it. On a GPU with small models
that wait, not the arithmetic, is what a step costs (gpt-fast keeps its decode loop free of them).
So a drafter computes each position's signals on the device and reads them to the host:

- at once, one read for both, only when the action's cut needs them to decide whether to draft on
  (``tau > 0`` or a stop rule: :attr:`Action.needs_signals`);
- otherwise once per step, all positions together (:meth:`DraftSignals.read`).

The engine's other host reads are per step too: the verdict (:func:`specrl.engine.rejection.judge`)
and the emitted tokens. Tests count the reads (``tests/test_host_reads.py``).
"""

from __future__ import annotations

import torch

from specrl.engine.sampling import entropy
from specrl.engine.types import Action


class DraftSignals:
    """The signals of one step's drafted positions, for rows drafting in lockstep ((B, V) laws).

    ``halts(position, q)`` returns, for each of the ``rows`` rows, whether ``action`` stops
    drafting before the token drawn from ``q``: all False, without a read, when the action needs
    no signals. ``read()`` returns every position's confidences and entropies, per row, as host
    floats.
    """

    def __init__(self, action: Action, rows: int = 1) -> None:
        self.action = action
        self.rows = rows
        self.eager = action.needs_signals
        self.device_values: list[torch.Tensor] = []  # (2, B) per position, not read yet
        self.host_values: list[list[list[float]]] = []  # [confidences, entropies] per position, read

    def halts(self, position: int, q: torch.Tensor) -> list[bool]:
        values = torch.stack([q.max(-1).values, entropy(q)])  # (2, B), on the device
        if not self.eager:
            self.device_values.append(values)
            return [False] * q.shape[0]
        confidences, entropies = values.tolist()  # the one read this position costs
        self.host_values.append([confidences, entropies])
        return [self.action.halts(position, c, h) for c, h in zip(confidences, entropies, strict=True)]

    def read(self) -> tuple[list[list[float]], list[list[float]]]:
        """(confidences, entropies), each [row][position], as host floats; one read for the
        positions still on the device."""
        if self.device_values:
            self.host_values += torch.stack(self.device_values).tolist()
            self.device_values = []
        confidences = [[c[r] for c, _ in self.host_values] for r in range(self.rows)]
        entropies = [[h[r] for _, h in self.host_values] for r in range(self.rows)]
        return confidences, entropies
