"""Which prompts a benchmark decodes: the first few of each domain of a split, tokenized once."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from specrl.envs.scenario import Scenario
from specrl.models import ModelPair

#: The embedded pair's prompt domains, in the order of every page.
DOMAINS = ("code", "prose", "math")

T = TypeVar("T")


def prompt_texts(pair: ModelPair, path: Path | None = None, split: str = "test") -> dict[str, list[str]]:
    """``{domain: [text]}``: from a JSON file (``{domain: [text]}``, or a zoo prompts.json whose
    ``split`` is used), else the pair's own prompts of ``split``; exits naming the fix if neither."""
    if path is not None:
        data = json.loads(Path(path).read_text())
        return data.get(split, data)
    if pair.prompts.get(split):
        return pair.prompts[split]
    raise SystemExit(
        "this pair has no embedded prompts: pass --prompts FILE (JSON {domain: [text]}, or a "
        "embedded pair prompts.json such as $SPECRL_HOME/embedded/<preset>-seed0/prompts.json)"
    )


def first_prompts(
    pair: ModelPair, split: str, domains: Sequence[str], count: int | None = None
) -> dict[str, list[list[int]]]:
    """The first ``count`` (None: all) prompts of each domain of the pair's ``split``, tokenized."""
    return {domain: [pair.encode(text) for text in pair.prompts[split][domain][:count]] for domain in domains}


def scenario_prompts(
    scenario: Scenario, pair: ModelPair, split: str, domains: Sequence[str], count: int | None = None
) -> dict[str, list[list[int]]]:
    """The first ``count`` (None: all) prompts of each domain of ``scenario``'s ``split`` (its prompt
    file or its pair's, chat-formatted where it says so), tokenized."""
    sets = scenario.with_overrides(split=split).prompt_sets(pair)
    return {domain: [pair.encode(text) for text in sets[domain][:count]] for domain in domains}


def interleaved(by_domain: Mapping[str, Sequence[T]]) -> list[T]:
    """The domains in turn (code, prose, math, code, ...), as far as the shortest one goes, so that
    a batch mixes domains as served traffic does."""
    return [item for group in zip(*by_domain.values(), strict=False) for item in group]
