"""The seed's TCP-like heuristic: grow k while the draft is accepted, shrink it when it is not."""

from __future__ import annotations

from collections import deque
from typing import Any

from specrl.engine.types import Action, StepResult

#: The fixed confidence cut of the seed's second variant (``TCPController.with_confidence_cut``).
SEED_CONFIDENCE_CUT = 0.25


class TCPController:
    """Additive increase / additive decrease of k on the recent acceptance rate.

    After every verification that proposed a token: append its (accepted, proposed) to a window
    of the last ``window`` such verifications; if accepted / proposed over the window is below
    ``low``, ``k -= step``; above ``high``, ``k += step``; clamp k to ``[k_min, k_max]``. A step
    that proposed nothing carries no evidence and is skipped. The window is not cleared when k
    changes (the seed's rule), so k overshoots after a burst of rejections or acceptances: a lag
    a learned controller can beat. ``tau`` is fixed; :meth:`with_confidence_cut` gives the seed's
    variant with ``tau = 0.25``. ``low``, ``high``, ``step`` and ``initial_k`` are the seed's;
    ``k_min`` is 1 because at k = 0 the rate could never recover.

    Example::

        decoder = specrl.SpeculativeDecoder(pair, TCPController.with_confidence_cut())
    """

    def __init__(
        self,
        window: int = 8,
        low: float = 0.7,
        high: float = 0.85,
        step: int = 1,
        k_min: int = 1,
        k_max: int = 8,
        initial_k: int = 5,
        tau: float = 0.0,
    ) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"need 0 <= low <= high <= 1, got low={low}, high={high}")
        if step < 1:
            raise ValueError(f"step must be >= 1, got {step}")
        if not 1 <= k_min <= initial_k <= k_max:
            raise ValueError(f"need 1 <= k_min <= initial_k <= k_max, got {k_min}, {initial_k}, {k_max}")
        Action(initial_k, tau)  # validates tau
        self.window = window
        self.low = low
        self.high = high
        self.step = step
        self.k_min = k_min
        self.k_max = k_max
        self.initial_k = initial_k
        self.tau = float(tau)
        self.k = initial_k
        self._recent: deque[tuple[int, int]] = deque(maxlen=window)  # (accepted, proposed)

    @classmethod
    def with_confidence_cut(cls, tau: float = SEED_CONFIDENCE_CUT, **kwargs: Any) -> TCPController:
        """The seed's second variant: the same rule with a fixed confidence cut (0.25 by default)."""
        return cls(tau=tau, **kwargs)

    @property
    def name(self) -> str:
        """Short label for tables: ``"tcp"``, or ``"tcp-tau0.25"`` with a confidence cut."""
        return "tcp" if self.tau == 0.0 else f"tcp-tau{self.tau:g}"

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted / proposed over the window; None before any token was proposed."""
        proposed = sum(p for _, p in self._recent)
        return sum(a for a, _ in self._recent) / proposed if proposed else None

    def reset(self) -> None:
        """Back to ``initial_k`` with an empty window (called at the start of each generation)."""
        self.k = self.initial_k
        self._recent.clear()

    def act(self, observation: Any) -> Action:
        """The current k and the fixed tau; the observation is not used."""
        return Action(self.k, self.tau)

    def observe(self, result: StepResult) -> None:
        """Add the verification to the window and move k by the rule."""
        if result.proposed == 0:
            return
        self._recent.append((result.accepted, result.proposed))
        rate = sum(a for a, _ in self._recent) / sum(p for _, p in self._recent)
        if rate < self.low:
            self.k -= self.step
        elif rate > self.high:
            self.k += self.step
        self.k = min(self.k_max, max(self.k_min, self.k))

    def __repr__(self) -> str:
        return (
            f"TCPController(window={self.window}, low={self.low}, high={self.high}, step={self.step}, "
            f"k_min={self.k_min}, k_max={self.k_max}, initial_k={self.initial_k}, tau={self.tau})"
        )
