"""Plain data (a YAML file's contents) into the scenario's dataclasses, with errors that name the key."""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Mapping
from dataclasses import asdict, fields, replace
from pathlib import Path
from typing import Any

import yaml

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


def defaults_yaml() -> str:
    """Every key of a scenario file with its default, as YAML, generated from the dataclasses
    (the one place defaults live); :meth:`Scenario.from_dict` of it gives ``Scenario()``."""
    data = asdict(Scenario())
    del data["source"]  # where a scenario was loaded from, not a key of the file
    data = json.loads(json.dumps(data))  # tuples become lists, which safe_dump writes
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


def check_mapping(data: Any, cls: type, key: str, source: str) -> dict[str, Any]:
    """``data`` as a dict whose keys are fields of ``cls``; otherwise a ScenarioError."""
    where = f"'{key}'" if key else "the top level"
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{source}: {where} must be a mapping of keys to values, got {data!r}")
    known = [f.name for f in fields(cls) if f.name != "source"]
    for name in data:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ScenarioError(
                f"{source}: unknown key '{key + '.' if key else ''}{name}' in {where}.{hint} "
                f"Known keys: {', '.join(known)}"
            )
    return dict(data)


def check_leaf(value: Any, kind: type, key: str, source: str, optional: bool = False) -> Any:
    """Check one leaf value; ints are accepted where floats are expected."""
    if value is None and optional:
        return None
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if kind is float and ok and not math.isfinite(value):
        ok = False
    if not ok:
        expected = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[kind]
        expected += " or null" if optional else ""
        raise ScenarioError(f"{source}: '{key}' must be {expected}, got {value!r}")
    return value


def check_leaves(data: dict[str, Any], cls: type, prefix: str, source: str) -> dict[str, Any]:
    """Type-check the scalar fields of a flat section against the dataclass annotations
    (strings such as "float" or "str | None", since the modules use postponed annotations)."""
    kinds = {"int": int, "float": float, "str": str, "bool": bool}
    out = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        annotation = str(f.type).replace(" ", "")
        optional = annotation.endswith("|None")
        out[f.name] = check_leaf(
            data[f.name], kinds[annotation.removesuffix("|None")], prefix + f.name, source, optional
        )
    return out


def parse_prompt_file_keys(section: dict[str, Any], prompts: dict[str, Any], source: str) -> PromptSpec:
    """The ``prompts`` section: ``prompts`` (domains, split, file: parsed) with the keys that read
    and split a ``.jsonl`` or ``.txt`` file; ``domains`` defaults to the file's one domain, and must
    be given with ``domain_field``."""
    for key in ("text_field", "domain_field", "file_domain"):
        if key in section:
            prompts[key] = check_leaf(
                section[key], str, f"prompts.{key}", source, optional=key != "text_field"
            )
    if "split_seed" in section:
        prompts["split_seed"] = check_leaf(section["split_seed"], int, "prompts.split_seed", source)
    if "split_fractions" in section:
        prompts["split_fractions"] = check_shares(
            section["split_fractions"],
            "prompts.split_fractions",
            "each split to its share, e.g. {train: 0.8, validation: 0.1, test: 0.1}",
            source,
        )
    spec = PromptSpec(**prompts)
    if "domains" not in section and spec.single_domain is not None:
        spec = replace(spec, domains={spec.single_domain: 1.0})
    if "domains" not in section and spec.domain_field is not None:
        raise ScenarioError(
            f"{source}: 'prompts.domains' is needed with prompts.domain_field: give the domains to draw "
            f"from (values of the records' '{spec.domain_field}'), with weights, e.g. {{faq: 1.0, code: 1.0}}"
        )
    return spec


def check_shares(value: Any, key: str, what: str, source: str) -> dict[str, float]:
    """A mapping of names to numbers (``key`` must map ``what``), each checked as a float."""
    if not isinstance(value, Mapping):
        raise ScenarioError(f"{source}: '{key}' must map {what}, got {value!r}")
    return {str(name): check_leaf(number, float, f"{key}.{name}", source) for name, number in value.items()}


def parse(data: Any, source: str, base_dir: Path) -> Scenario:
    top = check_mapping(data, Scenario, "", source)
    kwargs: dict[str, Any] = {}
    for key in ("name", "description"):
        if key in top:
            kwargs[key] = check_leaf(top[key], str, key, source)
    for key in ("max_new_tokens", "k_max"):
        if key in top:
            kwargs[key] = check_leaf(top[key], int, key, source)
    if "stop_at_eos" in top:
        kwargs["stop_at_eos"] = check_leaf(top["stop_at_eos"], bool, "stop_at_eos", source)
    if "pair" in top:
        section = check_mapping(top["pair"], PairSpec, "pair", source)
        kwargs["pair"] = PairSpec(**check_leaves(section, PairSpec, "pair.", source))
    if "prompts" in top:
        section = check_mapping(top["prompts"], PromptSpec, "prompts", source)
        prompts: dict[str, Any] = {}
        if "split" in section:
            prompts["split"] = check_leaf(section["split"], str, "prompts.split", source)
        if section.get("file") is not None:
            prompts["file"] = str(base_dir / check_leaf(section["file"], str, "prompts.file", source))
        if "domains" in section:
            prompts["domains"] = check_shares(
                section["domains"], "prompts.domains", "domain names to weights, e.g. {code: 1.0}", source
            )
        kwargs["prompts"] = parse_prompt_file_keys(section, prompts, source)
    if "sampling" in top:
        section = check_mapping(top["sampling"], SamplingConfig, "sampling", source)
        kwargs["sampling"] = SamplingConfig(**check_leaves(section, SamplingConfig, "sampling.", source))
    for key in ("tau_grid", "stop_grid"):
        if key in top:
            grid = top[key]
            if not isinstance(grid, list):
                raise ScenarioError(f"{source}: '{key}' must be a list of numbers in [0, 1], got {grid!r}")
            kwargs[key] = tuple(check_leaf(v, float, f"{key}[]", source) for v in grid)
    if "drafters" in top:
        names = top["drafters"]
        if not isinstance(names, list):
            raise ScenarioError(
                f"{source}: 'drafters' must be a list of names like [draft, ngram], got {names!r}"
            )
        kwargs["drafters"] = tuple(check_leaf(v, str, "drafters[]", source) for v in names)
    if "reward" in top:
        section = check_mapping(top["reward"], RewardSpec, "reward", source)
        kwargs["reward"] = RewardSpec(**check_leaves(section, RewardSpec, "reward.", source))
    if "latency" in top:
        latency = check_leaf(top["latency"], str, "latency", source)
        if latency not in LATENCY_SOURCES:  # a file, relative to the scenario's folder
            latency = str(base_dir / Path(latency).expanduser())
        kwargs["latency"] = latency
    if "cost_model" in top:
        section = check_mapping(top["cost_model"], CostModel, "cost_model", source)
        kwargs["cost_model"] = CostModel(**check_leaves(section, CostModel, "cost_model.", source))
    if "shift" in top:
        shifts = top["shift"] or []
        if not isinstance(shifts, list):
            raise ScenarioError(
                f"{source}: 'shift' must be a list like [{{after_tokens: 64, domain: math}}], got {shifts!r}"
            )
        parsed = []
        for i, item in enumerate(shifts):
            section = check_mapping(item, DomainShift, f"shift[{i}]", source)
            missing = [f.name for f in fields(DomainShift) if f.name not in section]
            if missing:
                raise ScenarioError(
                    f"{source}: 'shift[{i}]' is missing {missing}; write e.g. "
                    "{after_tokens: 64, domain: math}"
                )
            parsed.append(DomainShift(**check_leaves(section, DomainShift, f"shift[{i}].", source)))
        kwargs["shift"] = tuple(parsed)
    if "batch" in top:
        section = check_mapping(top["batch"], BatchSpec, "batch", source)
        batch: dict[str, Any] = {}
        for key in ("size", "max_size", "requests"):
            if key in section:
                batch[key] = check_leaf(section[key], int, f"batch.{key}", source)
        if "load_unit" in section:
            batch["load_unit"] = check_leaf(section["load_unit"], str, "batch.load_unit", source)
        if "load" in section:
            phases = section["load"] or []
            if not isinstance(phases, list) or not all(isinstance(p, list) and len(p) == 2 for p in phases):
                raise ScenarioError(
                    f"{source}: 'batch.load' must be a list of [seconds, requests_per_second] phases "
                    f"(with load_unit: plain, [plain request times, share of plain capacity]), "
                    f"e.g. [[60, 0.2], [60, 1.5]], got {phases!r}"
                )
            batch["load"] = tuple(
                (
                    check_leaf(t, float, "batch.load[][0]", source),
                    check_leaf(r, float, "batch.load[][1]", source),
                )
                for t, r in phases
            )
        kwargs["batch"] = BatchSpec(**batch)
    return Scenario(**kwargs, source=source)
