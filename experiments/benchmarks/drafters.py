"""``experiments/bench_drafters.py``'s runs and table: every drafter of the pool at every static k,
and the seed's pool rule over them, against plain decoding of the same prompts, greedy; the best k
of each chosen on the validation prompts and reported on the test prompts (docs/design.md
section 4b).

The protocol, played by :func:`~specrl.evaluation.compare.compare`: one untimed warm-up of every
configuration on the first group of prompts (the quantised copies are built there, untimed), then
per pass and group every configuration in a seeded random order
(:func:`~specrl.evaluation.compare.shuffled`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from specrl.controllers import Controller, PoolRuleController, StaticController
from specrl.engine import SpeculativeDecoder
from specrl.evaluation.compare import Trial, compare, shuffled, unseeded
from specrl.evaluation.intervals import paired_ratio_interval
from specrl.evaluation.records import (
    acceptance_rate,
    median_speed,
    outputs_equal,
    paired_speeds,
    speedup,
)
from specrl.models import ModelPair

SPLITS = ("validation", "test")
QUANTIZED = ("draft-int8", "draft-int4")
PLAIN = ("plain", 0)
POOL_RULE = "pool rule"


@dataclass(frozen=True)
class Group:
    """Prompts decoded together: the ``index``-th group of ``batch`` prompts of a split and domain."""

    split: str
    domain: str
    index: int
    prompts: list[list[int]]


def configurations(drafters: Sequence[str], ks: Sequence[int]) -> list[tuple[str, int]]:
    """Plain decoding, every (drafter, k), and the seed's pool rule over the same drafters at each k."""
    return [PLAIN] + [(drafter, k) for drafter in [*drafters, POOL_RULE] for k in ks]


def controller_of(drafter: str, k: int, drafters: Sequence[str]) -> Controller:
    """A fresh controller of a configuration (the pool rule keeps state over a generation)."""
    if drafter == POOL_RULE:
        return PoolRuleController(tuple(drafters), k=k)
    return StaticController(k, 0.0, "draft" if drafter == "plain" else drafter)


def call(pair: ModelPair, controller: Controller, prompts: list[list[int]], max_new_tokens: int) -> dict:
    """One generation of ``prompts`` decoded together (a batch of one for a single prompt)."""
    outs = SpeculativeDecoder(pair, controller).generate_batch(prompts, max_new_tokens=max_new_tokens)
    stats = outs.stats
    return {
        "ids": [out.token_ids for out in outs],
        "tokens": stats.new_tokens,
        "seconds": stats.seconds,
        "draft_seconds": stats.draft_seconds,
        "verify_seconds": stats.verify_seconds,
        "steps": stats.steps,
        "proposed": stats.proposed,
        "accepted": stats.accepted,
        # the batch's draft forwards: one per position its longest-drafting row looked at
        "drafted_positions": sum(
            max(step.draft_forwards for step in steps)
            for steps in zip(*(out.steps for out in outs), strict=False)
        ),
    }


def measure(
    pair: ModelPair,
    prompts: Mapping[str, Mapping[str, list[list[int]]]],
    drafters: Sequence[str],
    ks: Sequence[int],
    max_new_tokens: int,
    repeats: int,
    seed: int,
    batch: int = 1,
) -> list[dict]:
    """Every configuration on every group of ``batch`` prompts of every (split, domain) of
    ``prompts`` ({split: {domain: [ids]}}): a warm-up, then interleaved passes; the runs in run order."""
    groups = [Group(split, domain, i // batch, ps[i : i + batch]) for split, by_domain in prompts.items()
              for domain, ps in by_domain.items() for i in range(0, len(ps), batch)]  # fmt: skip
    configs = {f"{drafter} k={k}": (drafter, k) for drafter, k in configurations(drafters, ks)}
    players = {
        name: lambda group, _seed, d=d, k=k: call(
            pair, controller_of(d, k, drafters), group.prompts, max_new_tokens
        )
        for name, (d, k) in configs.items()
    }
    progress = tqdm(total=repeats * len(groups) * len(configs), desc="drafters", unit="gen", mininterval=5.0)

    def advance(trial: Trial[dict] | None) -> None:
        if trial is not None:
            progress.update()

    trials = compare(
        players, groups, repeats, order=shuffled(seed), seed=unseeded, warmup=1, on_trial=advance
    )
    progress.close()
    runs = []
    for trial in trials:
        group, (drafter, k) = groups[trial.episode], configs[trial.player]
        where = {"split": group.split, "domain": group.domain, "prompt": group.index, "repeat": trial.repeat}
        runs.append({**where, "drafter": drafter, "k": k, **trial.record})
    return runs


def cost(runs: list[dict]) -> float | None:
    """Draft seconds per drafted position over verify seconds per step (None: nothing drafted)."""
    positions = sum(r["drafted_positions"] for r in runs)
    if not positions:
        return None
    return (sum(r["draft_seconds"] for r in runs) / positions) / (
        sum(r["verify_seconds"] for r in runs) / sum(r["steps"] for r in runs)
    )


def summarise(runs: list[dict], drafters: Sequence[str], domains: Sequence[str], ks: Sequence[int]) -> dict:
    """Per domain and drafter: speed-up per k on both splits, the k chosen on validation, test figures."""

    def select(split, domain, drafter=None, k=None):
        return [r for r in runs if r["split"] == split and r["domain"] == domain
                and (drafter is None or r["drafter"] == drafter) and (k is None or r["k"] == k)]  # fmt: skip

    def same_prompt(run: dict) -> tuple:
        return run["split"], run["domain"], run["prompt"], run["repeat"]

    table: dict = {}
    for domain in domains:
        plain = {split: select(split, domain, "plain") for split in SPLITS}
        table[domain] = {"plain_tokens_per_s": median_speed(plain["test"]), "drafters": {}}
        for drafter in drafters:
            by_k = {  # keyed by str(k), as the JSON has them
                split: {str(k): speedup(select(split, domain, drafter, k), plain[split]) for k in ks}
                for split in SPLITS
            }
            best_k = max(ks, key=lambda k: by_k["validation"][str(k)])
            mine = [r for r in runs if r["domain"] == domain and r["drafter"] == drafter]
            table[domain]["drafters"][drafter] = {
                "speedup_by_k": by_k,
                "best_k": best_k,
                "speedup": by_k["test"][str(best_k)],
                **paired_ratio_interval(
                    *paired_speeds(select("test", domain, drafter, best_k), plain["test"])
                ).as_json("speedup"),
                "acceptance": acceptance_rate(select("test", domain, drafter, best_k)),
                "acceptance_by_k": {str(k): acceptance_rate(select("test", domain, drafter, k)) for k in ks},
                "cost": cost(select("test", domain, drafter)),
                "identical_to_plain": outputs_equal(
                    mine, plain["validation"] + plain["test"], key=same_prompt
                ),
            }
        _compare_drafters(table[domain], drafters, ks)
    return table


def _compare_drafters(entry: dict, drafters: Sequence[str], ks: Sequence[int]) -> None:
    """The best single drafter (and the pool rule against it), and each quantised draft against
    the full-precision one, into one domain's ``entry``."""
    rows = entry["drafters"]
    singles = [d for d in drafters if d != POOL_RULE]
    # the best single drafter at its best static k, both chosen on validation
    best = max(singles, key=lambda d: rows[d]["speedup_by_k"]["validation"][str(rows[d]["best_k"])])
    entry["best_drafter"] = best
    if POOL_RULE in rows:
        entry["pool_rule_vs_best_single"] = rows[POOL_RULE]["speedup"] / rows[best]["speedup"]
    if "draft" in drafters:
        full = rows["draft"]
        for name in (q for q in QUANTIZED if q in drafters):
            row = rows[name]
            row["vs_draft"] = {
                "acceptance_change": statistics.mean(
                    row["acceptance_by_k"][str(k)] - full["acceptance_by_k"][str(k)] for k in ks
                ),
                "cost_ratio": row["cost"] / full["cost"] if row["cost"] and full["cost"] else None,
            }
