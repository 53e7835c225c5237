"""``experiments/bench_batch.py``'s runs and table: B prompts decoded together with
``StaticController(k)`` for every batch size B and k, greedy; speed-up over plain batched decoding
(k = 0) at the same B, acceptance per row, verification cost per step, and every output checked
against plain batched decoding.

The protocol, played by :func:`~specrl.evaluation.compare.compare`: one untimed warm-up pass of
every (B, k) on at most 2 rows and 4 tokens (allocator, kernels at every shape), then per pass
every (B, k) once in a seeded random order (:func:`~specrl.evaluation.compare.shuffled`).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from benchmarks.prompts import DOMAINS, first_prompts, interleaved
from specrl.controllers import StaticController
from specrl.engine import SpeculativeDecoder
from specrl.evaluation.compare import Trial, compare, shuffled, unseeded
from specrl.evaluation.intervals import paired_ratio_interval
from specrl.evaluation.records import median_speed, outputs_equal, paired_speeds, speedup
from specrl.models import ModelPair


@dataclass(frozen=True)
class Load:
    """What a pass decodes: the first ``rows`` rows of each batch (None: all B), ``max_new_tokens`` each."""

    max_new_tokens: int
    rows: int | None = None


#: The warm-up pass: every shape, cheaply.
WARMUP = Load(max_new_tokens=4, rows=2)


def prompt_pool(pair: ModelPair) -> list[list[int]]:
    """The test prompts of every domain, interleaved (code, prose, math, code, ...)."""
    return interleaved(first_prompts(pair, "test", [d for d in DOMAINS if d in pair.prompts["test"]]))


def call(pair: ModelPair, prompts: list[list[int]], k: int, max_new_tokens: int) -> dict:
    """One timed generation of ``prompts`` as one batch."""
    outputs = SpeculativeDecoder(pair, StaticController(k)).generate(prompts, max_new_tokens=max_new_tokens)
    stats = outputs.stats
    return {
        "ids": ids_digest([output.token_ids for output in outputs]),  # compared across k: lossless
        "tokens": stats.new_tokens,
        "seconds": stats.seconds,
        "draft_seconds": stats.draft_seconds,
        "verify_seconds": stats.verify_seconds,
        "steps": stats.steps,
        # row i is prompt i of the pool (None: the row proposed nothing)
        "row_acceptance": [
            output.stats.acceptance_rate if output.stats.proposed else None for output in outputs
        ],
    }


def ids_digest(ids: list[list[int]]) -> str:
    """A fingerprint of every row's output (the JSON keeps it instead of the tokens)."""
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def measure(
    pair: ModelPair,
    pool: Sequence[list[int]],
    batch_sizes: Sequence[int],
    ks: Sequence[int],
    max_new_tokens: int,
    repeats: int,
    seed: int,
) -> list[dict]:
    """Every (B, k) once per pass, shuffled, after an untimed warm-up pass; the runs in run order.
    Row i of every batch is prompt i of ``pool`` (repeated if B exceeds it)."""
    batches = {b: [pool[i % len(pool)] for i in range(b)] for b in batch_sizes}
    configs = {f"B={b} k={k}": (b, k) for b in batch_sizes for k in ks}
    players = {
        name: (lambda load, _seed, b=b, k=k: call(pair, batches[b][: load.rows], k, load.max_new_tokens))
        for name, (b, k) in configs.items()
    }
    progress = tqdm(total=repeats * len(configs), desc="batch", unit="batch", mininterval=5.0)

    def advance(trial: Trial[dict] | None) -> None:
        if trial is not None:
            progress.update()

    trials = compare(players, [Load(max_new_tokens)], repeats, order=shuffled(seed), seed=unseeded,
                     warmup=1, warmup_episode=WARMUP, on_trial=advance)  # fmt: skip
    progress.close()
    return [
        {"repeat": t.repeat, "batch": configs[t.player][0], "k": configs[t.player][1], **t.record}
        for t in trials
    ]


def summarise(runs: list[dict], batch_sizes: Sequence[int], ks: Sequence[int]) -> dict:
    """Per (B, k): median tokens/s, the paired speed-up over plain at the same B (and its 95% interval and n),
    per-row acceptance, verification ms per step, the lossless check; per B the best k."""
    table: dict[str, dict] = {}
    for b in batch_sizes:
        row: dict[str, dict] = {}
        plain = [run for run in runs if run["batch"] == b and run["k"] == 0] if 0 in ks else None
        for k in ks:
            mine = [run for run in runs if run["batch"] == b and run["k"] == k]
            acceptance = [a for run in mine for a in run["row_acceptance"] if a is not None]
            row[str(k)] = {
                "tokens_per_s": median_speed(mine),
                "speedup": speedup(mine, plain) if plain else None,
                **(
                    paired_ratio_interval(*paired_speeds(mine, plain)).as_json("speedup")
                    if plain
                    else {"speedup_ci95": None, "speedup_n": None}
                ),
                "row_acceptance_mean": statistics.mean(acceptance) if acceptance else None,
                "row_acceptance_min": min(acceptance) if acceptance else None,
                "row_acceptance_max": max(acceptance) if acceptance else None,
                "verify_ms_per_step": 1e3
                * statistics.median(run["verify_seconds"] / run["steps"] for run in mine),
                "lossless": outputs_equal(mine, plain, key=lambda run: run["repeat"]) if plain else None,
            }
        best = max((k for k in ks if k), key=lambda k: row[str(k)]["speedup"] or 0.0, default=None)
        table[str(b)] = {"ks": row, "best_k": best}
    return table


def same_prompt_spread(runs: list[dict], ks: Sequence[int]) -> dict[str, float]:
    """Per k: the largest difference, over prompts, between one prompt's acceptance at two batch
    sizes (row i of every batch is prompt i). Exact speculative sampling says 0 for greedy rows."""
    spread = {}
    for k in ks:
        if not k:
            continue
        by_prompt: dict[int, list[float]] = {}
        for run in runs:
            if run["k"] == k:
                for i, a in enumerate(run["row_acceptance"]):
                    if a is not None:
                        by_prompt.setdefault(i, []).append(a)
        shared = [values for values in by_prompt.values() if len(values) > 1]
        spread[str(k)] = max((max(v) - min(v) for v in shared), default=0.0)
    return spread
