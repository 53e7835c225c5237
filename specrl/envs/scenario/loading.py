"""Finding and reading scenario files: a path, or the name of a shipped scenario."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from specrl.envs.scenario.schema import Scenario, ScenarioError

# Shipped scenarios are package data (specrl/scenarios/*.yaml), so an installed wheel has them.
SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"


def shipped_scenarios() -> list[str]:
    """Names of the scenario files shipped in the package (``specrl/scenarios/``)."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def embedded_scenarios() -> list[str]:
    """Names of the shipped scenarios on the embedded pair's own prompts (not those of a pretrained
    pair, such as ``smollm2``)."""
    pairs = {name: load_scenario(name).pair for name in shipped_scenarios()}
    return [name for name, pair in pairs.items() if pair.preset in (None, "small") and pair.target is None]


def scenario_path(name: str | Path) -> Path:
    """A scenario file: a path (relative to the working directory), or the name of a shipped
    scenario ("code" -> specrl/scenarios/code.yaml, from any working directory)."""
    path = Path(name).expanduser()
    candidates = [path]
    if not path.is_absolute() and not path.suffix and len(path.parts) == 1:
        candidates.append(SCENARIO_DIR / f"{path}.yaml")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ScenarioError(
        f"scenario file '{name}' not found (looked at {', '.join(str(c) for c in candidates)}); give the "
        f"path of a YAML file or the name of a shipped scenario: {', '.join(shipped_scenarios()) or 'none'}"
    )


def load_scenario(name: str | Path) -> Scenario:
    """Read and validate a scenario YAML file (a path, or a shipped name such as "code")."""
    path = scenario_path(name)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ScenarioError(f"{path}: not valid YAML: {error}") from None
    if data is None:
        data = {}
    if isinstance(data, Mapping) and "name" not in data:
        data = {"name": path.stem, **data}
    return Scenario.from_dict(data, source=str(path), base_dir=path.parent)
