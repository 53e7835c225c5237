"""Scenario defaults live in one place, the dataclasses; the module doc describes the file only."""

from __future__ import annotations

import re
from dataclasses import fields, is_dataclass

import yaml

import specrl.envs.scenario as scenario_module
from specrl.envs.scenario import Scenario, defaults_yaml

DOC = scenario_module.__doc__


def _sections(cls: type = Scenario, prefix: str = "") -> dict[str, type]:
    """Every dataclass a scenario file has a section for, by key ('' is the top level)."""
    out = {prefix: cls}
    for f in fields(cls):
        default = f.default_factory() if callable(f.default_factory) else f.default
        if is_dataclass(default):
            out.update(_sections(type(default), f.name))
    return out


def _leaves(data: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for key, value in data.items():
        if isinstance(value, dict) and key != "domains":
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def test_the_generated_defaults_load_back_to_the_dataclass_defaults():
    data = yaml.safe_load(defaults_yaml())
    assert Scenario.from_dict(data, source=None) == Scenario()
    keys = {f.name for f in fields(Scenario)} - {"source"}
    assert set(data) == keys  # every key of a file, and only those


def test_the_module_doc_names_every_key():
    for section, cls in _sections().items():
        names = [f.name for f in fields(cls) if f.name != "source"]
        missing = [n for n in names if not re.search(rf"\b{n}\b", DOC)]
        assert not missing, (
            f"the scenario module doc does not describe {section or 'top-level'} keys {missing}"
        )
        assert cls.__name__ in DOC, f"the module doc does not point to {cls.__name__}"


def test_the_module_doc_states_no_default_value():
    """A default written in prose would be a second copy that can drift from the dataclass."""
    for key, value in _leaves(yaml.safe_load(defaults_yaml())).items():
        name = key.rpartition(".")[2]
        written = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
        assert f"{name}: {written}" not in DOC, f"the scenario module doc states the default of {key}"


def test_the_example_in_the_module_doc_is_a_valid_scenario():
    example = DOC.split("turns into prose mid-episode::", 1)[1].split("\n\n")[1]
    scenario = Scenario.from_dict(yaml.safe_load(example), source="the module doc")
    assert scenario.sampling.temperature == 1.0 and scenario.shift[0].domain == "prose"
