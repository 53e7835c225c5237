"""``experiments/bench_hf_generate.py``'s rows and runs: specrl inside HF ``generate``
(``custom_generate=specrl.hf.speculative_generate``) against HF's own assisted generation, every
row a ``pair.target.generate`` call on the same prompt ids, greedy, exactly ``max_new_tokens``
tokens (``eos_token_id=None``); ratios against ``hf plain``.

The protocol, played by :func:`~specrl.evaluation.compare.compare`: one untimed warm-up of every
row on the first prompt, then per pass and prompt every row in a seeded random order
(:func:`~specrl.evaluation.compare.shuffled`). In transformers 5.x the assisted settings are read
from the assistant's generation_config, so each assisted row owns a copy that is swapped onto the
draft for its calls only (:mod:`specrl.hf_assisted`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

import specrl
from specrl.controllers import LearnedController, StaticController, TCPController
from specrl.engine.timing import DeviceClock
from specrl.evaluation.compare import compare, shuffled, unseeded
from specrl.evaluation.intervals import paired_ratio_interval
from specrl.evaluation.records import (
    acceptance_rate,
    median_speed,
    outputs_equal,
    paired_speeds,
    speedup,
)
from specrl.hf import speculative_generate
from specrl.hf_assisted import (
    ForwardCounter,
    assistant_config,
    assistant_settings,
    confidence_threshold_variant,
    resolved_assistant_settings,
)
from specrl.models import ModelPair

REFERENCE = "hf plain"
#: Where a shipped policy's name is looked up: the package's policies, then a checkout's top level.
POLICY_FOLDERS = (
    Path(specrl.__file__).resolve().parent / "policies",
    Path(specrl.__file__).resolve().parents[1] / "policies",
)


def resolve_policy(policy: str | Path) -> LearnedController:
    """A policy folder, or a shipped policy's name (package data, or the top-level ``policies/``)."""
    candidates = [Path(policy)]
    if not Path(policy).is_dir():
        candidates += [folder / str(policy) for folder in POLICY_FOLDERS]
    for folder in candidates:
        if (folder / "metadata.json").is_file():
            return LearnedController.load(folder)
    return LearnedController.load(policy)  # a name the loader itself knows


@dataclass
class Row:
    """One configuration: how to call ``generate`` on a prompt."""

    name: str
    kwargs: dict = field(default_factory=dict)
    assistant: object = None  # the assisted rows' GenerationConfig, swapped onto the draft
    specrl: bool = False


def make_rows(pair: ModelPair, k: int, policy: LearnedController) -> list[Row]:
    """HF plain, HF assisted (default, heuristic, constant k), specrl static k, TCP and the policy."""
    draft_config = pair.draft.generation_config
    assisted = {"assistant_model": pair.draft}
    constant = assistant_config(
        draft_config,
        num_assistant_tokens=k,
        num_assistant_tokens_schedule="constant",
        assistant_confidence_threshold=0.0,
    )
    rows = [
        Row(REFERENCE),
        Row("hf assisted default", assisted, assistant_config(draft_config)),
        Row(
            "hf assisted heuristic",
            assisted,
            assistant_config(draft_config, num_assistant_tokens_schedule="heuristic"),
        ),
        Row(f"hf assisted constant k={k}", assisted, constant),
    ]
    for name, controller in (
        (f"specrl static k={k}", StaticController(k)),
        ("specrl tcp", TCPController()),
        (f"specrl {policy.name}", policy),
    ):
        kwargs = {"custom_generate": speculative_generate, "draft": pair.draft, "controller": controller,
                  "return_dict_in_generate": True}  # fmt: skip
        rows.append(Row(name, kwargs, specrl=True))
    return rows


def call(
    pair: ModelPair, row: Row, prompt: list[int], max_new_tokens: int, clock: DeviceClock, counter
) -> dict:
    """One timed ``generate`` call of ``row``; its new ids, seconds, forwards and (specrl) stats."""
    ids = torch.tensor([prompt], dtype=torch.long, device=pair.device)
    counter.reset()
    with assistant_settings(pair.draft, row.assistant):
        start = clock.now()
        out = pair.target.generate(
            ids, do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None, **row.kwargs
        )
        seconds = clock.now() - start
    sequences = out.sequences if row.specrl else out
    run = {
        "ids": sequences[0, len(prompt) :].tolist(),
        "seconds": seconds,
        "target_forwards": counter.counts["target"],
        "draft_forwards": counter.counts["draft"],
    }
    if row.specrl:
        run["proposed"], run["accepted"] = out.stats.proposed, out.stats.accepted
    return run


def run(
    pair: ModelPair,
    prompts: dict[str, list[list[int]]] | list[list[int]],
    max_new_tokens: int = 64,
    repeats: int = 5,
    policy: str | Path = "default",
    k: int = 4,
    seed: int = 0,
) -> dict:
    """Time every row on every prompt ({domain: [ids]}, or a list: domain "all"); a warm-up pass,
    then ``repeats`` interleaved passes. Returns the report's rows, runs, prompt count and config."""
    if not isinstance(prompts, dict):
        prompts = {"all": list(prompts)}
    items = [(domain, p) for domain, ids in prompts.items() for p in ids]
    rows = make_rows(pair, k, resolve_policy(policy))
    clock = DeviceClock(pair.device)
    with ForwardCounter(pair) as counter:
        players = {
            row.name: (lambda item, _seed, row=row: call(pair, row, item[1], max_new_tokens, clock, counter))
            for row in rows
        }
        trials = compare(players, items, repeats, order=shuffled(seed), seed=unseeded, warmup=1)
    runs = [
        {"row": t.player, "repeat": t.repeat, "prompt": t.episode, "domain": items[t.episode][0], **t.record}
        for t in trials
    ]
    config = {
        "max_new_tokens": max_new_tokens,
        "repeats": repeats,
        "k": k,
        "policy": str(policy),
        "seed": seed,
    }
    config["domains"] = {domain: len(ids) for domain, ids in prompts.items()}
    config["assistant_settings"] = {
        row.name: resolved_assistant_settings(row.assistant) for row in rows if row.assistant is not None
    }
    config["hf_confidence_threshold"] = confidence_threshold_variant()
    return {
        "rows": summarise(rows, runs, list(prompts)),
        "runs": runs,
        "prompts": len(items),
        "config": config,
    }


def summarise(rows: Sequence[Row], runs: list[dict], domains: Sequence[str]) -> list[dict]:
    """Per row: tokens/s (median over passes, per domain and over all), the ratio of that to
    ``hf plain``'s and the paired ratio with its 95% interval and n, tokens per target forward, acceptance
    (specrl rows), and whether every output equals ``hf plain``'s on the same prompt and pass."""
    counted = [{**r, "tokens": len(r["ids"])} for r in runs]
    reference = [r for r in counted if r["row"] == REFERENCE]
    summaries = []
    for row in rows:
        mine = [r for r in counted if r["row"] == row.name]
        summary = {
            "method": row.name,
            "tokens_per_s": median_speed(mine),
            "per_domain": {d: median_speed([r for r in mine if r["domain"] == d]) for d in domains},
            "tokens_per_target_forward": sum(r["tokens"] for r in mine)
            / sum(r["target_forwards"] for r in mine),
            "identical_to_plain": outputs_equal(mine, reference, key=lambda r: (r["repeat"], r["prompt"])),
            "paired_ratio_vs_plain": speedup(mine, reference),
            **paired_ratio_interval(*paired_speeds(mine, reference)).as_json("ratio_vs_plain"),
        }
        if row.specrl:
            summary["acceptance_rate"] = acceptance_rate(mine)
        summaries.append(summary)
    base = summaries[0]["tokens_per_s"]
    for summary in summaries:
        summary["ratio_vs_plain"] = summary["tokens_per_s"] / base
    return summaries
