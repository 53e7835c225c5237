"""Plain data (a YAML file's contents) into the scenario's dataclasses, with errors that name the key.

Pydantic validates a file strictly, as the JSON it would be: an integer where an integer is meant, a
number where a float is, a string where a string is (no ``"8"`` for 8), lists for tuples, mappings
for sections. What only a file has is done here: ``prompts.file`` and a ``latency`` path are read
from the file's folder, ``prompts.domains`` defaults to the file's one domain and is needed with
``prompts.domain_field``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter, ValidationError

from specrl.engine.sampling import SamplingConfig
from specrl.envs.scenario.pairs import PairSpec
from specrl.envs.scenario.schema import (
    LATENCY_SOURCES,
    BatchSpec,
    DomainShift,
    PromptSpec,
    RewardSpec,
    Scenario,
    ScenarioError,
)
from specrl.latency import CostModel
from specrl.validation import explain, known_fields, unknown_key

SECTIONS = {
    "pair": PairSpec,
    "prompts": PromptSpec,
    "sampling": SamplingConfig,
    "reward": RewardSpec,
    "cost_model": CostModel,
    "shift": DomainShift,
    "batch": BatchSpec,
}
GRID = "a list of numbers in [0, 1]"
HINTS = {  # what a key must be, said with an error at or under it
    "tau_grid": GRID,
    "stop_grid": GRID,
    "drafters": "a list of names like [draft, ngram]",
    "shift": "a list like [{after_tokens: 64, domain: math}]",
    "prompts.domains": "a mapping of domain names to weights, e.g. {code: 1.0}",
    "prompts.split_fractions": "a mapping of each split to its share, e.g. {train: 0.8, validation: 0.1, "
    "test: 0.1}",
    "batch.load": "a list of [seconds, requests_per_second] phases (with load_unit: plain, [plain request "
    "times, share of plain capacity]), e.g. [[60, 0.2], [60, 1.5]]",
}
SCENARIO = TypeAdapter(Scenario)


def defaults_yaml() -> str:
    """Every key of a scenario file with its default, as YAML, generated from the dataclasses
    (the one place defaults live); :meth:`Scenario.from_dict` of it gives ``Scenario()``."""
    data = asdict(Scenario())
    del data["source"]  # where a scenario was loaded from, not a key of the file
    data = json.loads(json.dumps(data))  # tuples become lists, which safe_dump writes
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def known_keys(loc: tuple[str | int, ...]) -> list[str]:
    """The keys of the section at ``loc`` (``()``: the top level, ``("shift", 0)``: a shift)."""
    return [name for name in known_fields(SECTIONS[str(loc[0])] if loc else Scenario) if name != "source"]


def parse(data: Any, source: str, base_dir: Path) -> Scenario:
    if isinstance(data, Mapping):
        data = dict(data)
        if "source" in data:  # where the scenario was loaded from, set here; not a key of the file
            raise ScenarioError(f"{source}: {unknown_key(('source',), known_keys(()))}")
        prompts = data.get("prompts")
        if isinstance(prompts, Mapping) and isinstance(prompts.get("file"), str):
            data["prompts"] = {**prompts, "file": str(base_dir / prompts["file"])}
        if "shift" in data and data["shift"] is None:  # an empty key: no shift, as for batch.load
            data["shift"] = []
        batch = data.get("batch")
        if isinstance(batch, Mapping) and "load" in batch and batch["load"] is None:
            data["batch"] = {**batch, "load": []}
        latency = data.get("latency")
        if isinstance(latency, str) and latency not in LATENCY_SOURCES:
            data["latency"] = str(base_dir / Path(latency).expanduser())
    try:  # a YAML date or other value JSON lacks is read as its text
        scenario = SCENARIO.validate_json(json.dumps(data, default=str), strict=True)
    except ValidationError as error:
        raise ScenarioError(f"{source}: {explain(error, known_keys, HINTS)}") from None
    given = data["prompts"] if isinstance(data.get("prompts"), Mapping) else {}
    spec = scenario.prompts
    if "domains" not in given and spec.domain_field is not None:
        raise ScenarioError(
            f"{source}: 'prompts.domains' is needed with prompts.domain_field: give the domains to draw "
            f"from (values of the records' '{spec.domain_field}'), with weights, e.g. {{faq: 1.0, code: 1.0}}"
        )
    if "domains" not in given and spec.single_domain is not None:
        spec = replace(spec, domains={spec.single_domain: 1.0})
    return replace(scenario, prompts=spec, source=source)
