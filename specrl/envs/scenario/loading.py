"""Finding and reading scenario files: a path, or the name of a shipped scenario."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from specrl.envs.scenario.schema import Scenario, ScenarioError

# Shipped scenarios are package data (specrl/scenarios/*.yaml), so an installed wheel has them.
SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"
# Where they lived before the top-level folder was renamed scenarios/ (envs/ also named the Gymnasium
# package): "envs/code.yaml" still names the shipped file.
LEGACY_SCENARIO_FOLDER = "envs"
# Shipped scenarios that were renamed, old name -> new: the old name is refused with the new one
# (a name says one thing: "serving" is the package that serves requests, not a scenario).
RENAMED_SCENARIOS = {"serving": "arrivals"}


def shipped_scenarios() -> list[str]:
    """Names of the scenario files shipped in the package (``specrl/scenarios/``)."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def scenario_path(name: str | Path) -> Path:
    """A scenario file: a path (relative to the working directory), or the name of a shipped
    scenario ("code" -> specrl/scenarios/code.yaml, from any working directory). The path a
    shipped scenario had in the repository before it became package data ("envs/code.yaml")
    still names it when no such file exists."""
    path = Path(name).expanduser()
    candidates = [path]
    if not path.is_absolute():
        if not path.suffix and len(path.parts) == 1:
            candidates.append(SCENARIO_DIR / f"{path}.yaml")
        if len(path.parts) == 2 and path.parts[0] == LEGACY_SCENARIO_FOLDER:
            candidates.append(SCENARIO_DIR / path.name)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    if str(name) in RENAMED_SCENARIOS:
        raise ScenarioError(
            f"the shipped scenario '{name}' is now called '{RENAMED_SCENARIOS[str(name)]}' (same file, "
            f"same numbers); pass scenario='{RENAMED_SCENARIOS[str(name)]}'"
        )
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
