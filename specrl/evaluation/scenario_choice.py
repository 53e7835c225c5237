"""Which scenarios one evaluation run plays, with what the command line changes in each: the
tokens per episode, the latency model, and the pair (an embedded preset, or a hub target and
draft), on a device and dtype. One run evaluates one pair."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from specrl.envs import load_scenario, shipped_scenarios
from specrl.envs.scenario import PairSpec, Scenario


@dataclass(frozen=True)
class Overrides:
    """What changes in every scenario of a run (None: the scenario's own): tokens per episode,
    the latency source of modeled time, an embedded pair ``preset`` or a hub ``target`` and
    ``draft`` together, and the pair's device and dtype."""

    max_new_tokens: int | None = None
    latency: str | None = None
    preset: str | None = None
    target: str | None = None
    draft: str | None = None
    device: str | None = None
    dtype: str | None = None

    def apply(self, scenario: Scenario) -> Scenario:
        """``scenario`` with these overrides."""
        if self.max_new_tokens is not None:
            scenario = replace(scenario, max_new_tokens=self.max_new_tokens)
        if self.latency is not None:
            scenario = replace(scenario, latency=self.latency)
        if self.target is not None:
            pair = PairSpec(target=self.target, draft=self.draft)
        elif self.preset is not None:
            pair = replace(scenario.pair, preset=self.preset, target=None, draft=None)
        else:
            pair = scenario.pair
        # a device or dtype not given keeps the scenario's own
        pair = replace(pair, device=self.device or pair.device, dtype=self.dtype or pair.dtype)
        return replace(scenario, pair=pair)


def choose_scenarios(names: Sequence[str] | None, split: str, overrides: Overrides) -> list[Scenario]:
    """The scenarios ``names`` (YAML paths or shipped names) with ``overrides``; without names,
    every shipped scenario with prompts in ``split``. SystemExit if they name different pairs."""
    scenarios = []
    for name in names or shipped_scenarios():
        scenario = overrides.apply(load_scenario(name))
        if not names and not has_split(scenario, split):
            print(f"skipping scenario {name}: its domains have no {split} prompts", file=sys.stderr)
            continue
        scenarios.append(scenario)
    pairs = {s.pair for s in scenarios}
    if len(pairs) != 1:
        raise SystemExit(
            f"the scenarios name different pairs {sorted(map(str, pairs))}: one run evaluates one "
            "pair (use --preset or --target/--draft)"
        )
    return scenarios


def has_split(scenario: Scenario, split: str) -> bool:
    """Whether the embedded pair's prompt sets give every domain of ``scenario`` prompts in ``split``."""
    if scenario.prompts.file or scenario.pair.target is not None:
        return True  # a prompts file or hub pair: its own error says what is missing
    sets = scenario.pair.info().prompts  # read from the pair's folder, no weights loaded
    return all(sets.get(split, {}).get(domain) for domain in scenario.domains)
