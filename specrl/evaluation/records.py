"""Timed run records, the dicts a benchmark keeps of every generation it times (a ``repeat``, a
token count, ``seconds``, and where it drafts ``proposed`` and ``accepted``), and the definitions
every benchmark page uses (docs/design.md section 6): a repeat's speed is its tokens over its
seconds; a configuration's, the median over repeats; a speed-up, the paired ratio.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Sequence

from specrl.engine.types import throughput
from specrl.evaluation.compare import paired_ratio


def speed_per_repeat(runs: Sequence[dict], tokens: str = "tokens") -> dict[int, float]:
    """Tokens / seconds summed over the runs of each repeat, by repeat (ascending)."""
    by_repeat: dict[int, list[dict]] = {}
    for run in sorted(runs, key=lambda r: r["repeat"]):
        by_repeat.setdefault(run["repeat"], []).append(run)
    return {
        repeat: throughput(sum(r[tokens] for r in rs), sum(r["seconds"] for r in rs))
        for repeat, rs in by_repeat.items()
    }


def median_speed(runs: Sequence[dict], tokens: str = "tokens") -> float:
    """The median over repeats of :func:`speed_per_repeat`."""
    return statistics.median(speed_per_repeat(runs, tokens).values())


def paired_speeds(
    runs: Sequence[dict], reference: Sequence[dict], tokens: str = "tokens"
) -> tuple[list[float], list[float]]:
    """The speeds of ``runs`` and of ``reference`` in each repeat ``runs`` has, in the same order."""
    mine, base = speed_per_repeat(runs, tokens), speed_per_repeat(reference, tokens)
    return list(mine.values()), [base[repeat] for repeat in mine]


def speedup(runs: Sequence[dict], reference: Sequence[dict], tokens: str = "tokens") -> float:
    """The paired ratio of ``runs``'s speed to ``reference``'s: the median over repeats of the
    ratio within a repeat."""
    return paired_ratio(*paired_speeds(runs, reference, tokens))


def acceptance_rate(runs: Sequence[dict]) -> float:
    """Accepted / proposed draft tokens over every run (0 when none was proposed)."""
    proposed = sum(r["proposed"] for r in runs)
    return sum(r["accepted"] for r in runs) / proposed if proposed else 0.0


def outputs_equal(
    runs: Sequence[dict], reference: Sequence[dict], key: Callable[[dict], Hashable], ids: str = "ids"
) -> bool:
    """Whether every run's output ``ids`` equals that of the reference run of the same ``key``
    (the same prompt and repeat, say): the lossless check of greedy decoding."""
    expected = {key(r): r[ids] for r in reference}
    return all(r[ids] == expected[key(r)] for r in runs)
