"""The one rule for a paired ratio: its 95% t interval over repeats, n, and the verdict it gives."""

from __future__ import annotations

import statistics

import pytest

from specrl.evaluation.compare import paired_ratio
from specrl.evaluation.intervals import RatioInterval, paired_ratio_interval


def test_three_repeats_take_a_t_interval_of_4_303_standard_errors_each_side():
    # per-repeat ratios 1.1, 1.2, 1.0 (the machine twice as fast in the second repeat cancels)
    interval = paired_ratio_interval([11.0, 24.0, 10.0], [10.0, 20.0, 10.0])
    se = 0.1 / 3**0.5  # their standard deviation is 0.1
    assert interval.ratio == pytest.approx(1.1) and interval.n == 3
    assert interval.low == pytest.approx(1.1 - 4.303 * se, abs=1e-4)  # 0.852
    assert interval.high == pytest.approx(1.1 + 4.303 * se, abs=1e-4)  # 1.348
    assert interval.verdict == "tie"  # 1.1x, but 4.3 standard errors each side reach below 1
    assert str(interval) == "1.100x [0.852, 1.348] n=3"
    assert interval.cell() == "1.100 [0.852, 1.348] n=3"
    assert interval.ci95() == [interval.low, interval.high]
    assert interval.as_json("vs_plain") == {"vs_plain_ci95": [interval.low, interval.high], "vs_plain_n": 3}


def test_four_repeats_take_3_182_standard_errors_and_the_point_is_the_median_ratio():
    ours, theirs = [1.02, 1.05, 1.03, 1.10], [1.0, 1.0, 1.0, 1.0]
    interval = paired_ratio_interval(ours, theirs)
    se = statistics.stdev(ours) / 2
    assert interval.ratio == paired_ratio(ours, theirs) == pytest.approx(1.04)  # the median
    center = statistics.fmean(ours)  # the interval is the mean's
    assert (interval.low, interval.high) == pytest.approx(
        (center - 3.182 * se, center + 3.182 * se), abs=1e-4
    )


def test_verdicts_a_clear_win_a_clear_loss_a_tie_and_one_repeat():
    win = paired_ratio_interval([1.20, 1.21, 1.19], [1.0, 1.0, 1.0])
    assert win.verdict == "win" and win.low > 1
    loss = paired_ratio_interval([0.80, 0.81, 0.79], [1.0, 1.0, 1.0])
    assert loss.verdict == "loss" and loss.high < 1
    # 1.03x with a standard deviation of 0.02: a "win" beyond twice the standard error (0.023), a tie at 95%
    tie = paired_ratio_interval([1.01, 1.03, 1.05], [1.0, 1.0, 1.0])
    assert 1.03 - 2 * 0.02 / 3**0.5 > 1 and tie.verdict == "tie" and tie.low < 1 < tie.high
    one = paired_ratio_interval([1.5], [1.0])
    assert (one.ratio, one.low, one.high, one.n, one.verdict) == (1.5, None, None, 1, "n/a")
    assert str(one) == "1.500x [-] n=1" and one.ci95() is None
    assert RatioInterval(1.0, 1.0, 1.0, 2).verdict == "tie"  # identical speeds: the interval is 1


def test_the_pairs_must_match_and_be_some():
    with pytest.raises(ValueError):
        paired_ratio_interval([1.0, 2.0], [1.0])
    with pytest.raises(ValueError):
        paired_ratio_interval([], [])
