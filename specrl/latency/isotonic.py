"""Monotone fits of costs: more tokens, or a longer context, must not look cheaper by noise (a
policy would exploit the dip). Some dips on CPUs are real (matrix kernels change at vector
widths), so the loop fit keeps a decrease that noise cannot explain (:func:`tolerant_isotonic`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import isotonic_regression


def isotonic(values: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """The (weighted) least-squares non-decreasing fit of a sequence: pooled runs share their mean."""
    return isotonic_regression(values, weights=weights).x


def tolerant_isotonic(groups: Sequence[np.ndarray], z: float) -> np.ndarray:
    """One value per group (its mean), made non-decreasing where noise could explain a decrease.

    Pool adjacent violators (a pooled block's value is the mean of all its samples) unless the
    later block is lower by more than ``z`` standard errors of the difference. ``z`` = inf pools
    every violation (scipy's weighted isotonic regression); a finite ``z`` pools here, since the
    test depends on the spread of the blocks pooled so far.
    """
    if math.isinf(z):
        means = np.array([samples.mean() for samples in groups])
        return isotonic(means, weights=np.array([len(samples) for samples in groups], dtype=np.float64))
    blocks: list[tuple[int, np.ndarray]] = []  # (groups pooled, their samples)
    for samples in groups:
        block = (1, samples)
        while blocks:
            count, previous = blocks[-1]
            gap = previous.mean() - block[1].mean()
            noise = np.sqrt(previous.var(ddof=1) / len(previous) + block[1].var(ddof=1) / len(block[1]))
            if gap <= 0 or gap > z * noise:
                break
            blocks.pop()
            block = (count + block[0], np.concatenate([previous, block[1]]))
        blocks.append(block)
    return np.array([samples.mean() for count, samples in blocks for _ in range(count)])
