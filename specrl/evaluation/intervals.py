"""A paired ratio with its 95% interval: the one rule every page uses to call a comparison.

Two players measured in the same repeats give one ratio per repeat, ours / theirs; the ratio
shown is their median (:func:`~specrl.evaluation.compare.paired_ratio`), its interval the t
interval of their mean with n - 1 degrees of freedom. A ratio whose interval holds 1 is a tie.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from scipy.stats import t

from specrl.evaluation.compare import paired_ratio

#: Two-sided coverage of :func:`paired_ratio_interval`.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class RatioInterval:
    """A paired ratio, its 95% interval (``low``, ``high``; None with fewer than two repeats) and
    the number of repeats ``n`` behind it."""

    ratio: float
    low: float | None
    high: float | None
    n: int

    @property
    def verdict(self) -> str:
        """``"win"`` when the interval lies above 1, ``"loss"`` when below, ``"tie"`` when it holds
        1, ``"n/a"`` without an interval (one repeat)."""
        if self.low is None or self.high is None:
            return "n/a"
        if self.low > 1:
            return "win"
        if self.high < 1:
            return "loss"
        return "tie"

    def interval(self) -> str:
        """``[0.970, 1.250]``, or ``[-]`` without an interval."""
        if self.low is None or self.high is None:
            return "[-]"
        return f"[{self.low:.3f}, {self.high:.3f}]"

    def cell(self) -> str:
        """A table cell: ``1.107 [0.970, 1.250] n=3``."""
        return f"{self.ratio:.3f} {self.interval()} n={self.n}"

    def __str__(self) -> str:
        """``1.107x [0.970, 1.250] n=3``."""
        return f"{self.ratio:.3f}x {self.interval()} n={self.n}"

    def ci95(self) -> list[float] | None:
        """The interval as JSON stores it (``*_ci95``): ``[low, high]``, or None."""
        return None if self.low is None or self.high is None else [self.low, self.high]

    def as_json(self, key: str) -> dict:
        """``{KEY_ci95: [low, high] or None, KEY_n: n}``: the fields a report keeps beside the ratio
        ``KEY``."""
        return {f"{key}_ci95": self.ci95(), f"{key}_n": self.n}


def paired_ratio_interval(ours: Sequence[float], theirs: Sequence[float]) -> RatioInterval:
    """``ours`` over ``theirs`` (speeds of the same repeats, in the same order): the median of the
    per-repeat ratios and the 95% t interval of their mean (on the ratios, not their logs). No
    interval with one repeat."""
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    if not ratios:
        raise ValueError("a paired ratio needs at least one repeat")
    n = len(ratios)
    ratio = paired_ratio(ours, theirs)
    if n < 2:
        return RatioInterval(ratio, None, None, n)
    mean = statistics.fmean(ratios)
    half = float(t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * statistics.stdev(ratios) / math.sqrt(n)
    return RatioInterval(ratio, mean - half, mean + half, n)
