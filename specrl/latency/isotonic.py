"""Monotone fits of costs: more tokens, or a longer context, must not look cheaper by noise.

A policy would exploit a noisy dip in the latency tables, so the fits pool it away by
isotonic regression (scipy's pool-adjacent-violators). On CPUs some dips are real, though:
a verify over, e.g., 5 tokens can cost less than over 3 (the matrix kernels change at vector
widths), and pooling a real dip misprices both sizes by several percent. The loop fit
therefore keeps a decrease that noise cannot explain (:func:`tolerant_isotonic`).
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

    Pool adjacent violators, as isotonic regression does (a pooled block's value is the mean
    of all its samples: the group means weighted by their sizes), unless the later block is
    lower by more than ``z`` standard errors of the difference: such a decrease is the
    hardware's, not noise, and pooling it would misprice both. ``z`` = inf pools every
    violation: scipy's weighted isotonic regression of the group means. For a finite ``z`` the
    pooling runs here, left to right, since whether a block may pool depends on the spread of
    the blocks pooled so far, a test scipy's pooling cannot make.
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
