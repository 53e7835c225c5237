"""Package data (shipped scenarios and policies found from any working directory) and a trace-replay
simulator that starts without loading model weights."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import specrl
from specrl.envs import load_scenario, shipped_scenarios
from specrl.envs.scenario import SCENARIO_DIR, ScenarioError
from specrl.export import PolicyError
from specrl.export.layout import SHIPPED_POLICY_DIR, shipped_policies
from specrl.features import N_FEATURES

REPO = Path(__file__).resolve().parent.parent


def test_shipped_data_lives_inside_the_package_and_is_package_data():
    package = Path(specrl.__file__).resolve().parent
    assert SCENARIO_DIR.parent == package and SHIPPED_POLICY_DIR.parent == package
    assert {"code", "mixed", "prose_t1"} <= set(shipped_scenarios())
    assert "default" in shipped_policies()
    # one source of truth: the top-level folders they came from are gone
    assert not (REPO / "envs").exists() and not (REPO / "policies").exists()
    pyproject = (REPO / "pyproject.toml").read_text()
    for pattern in ("scenarios/*.yaml", "policies/*/*", "zoo/weights/**/*"):
        assert f'"{pattern}"' in pyproject


def test_scenarios_and_policies_resolve_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_scenario("code").name == "code"
    # the path a shipped scenario had before it became package data still names it
    assert load_scenario("envs/code.yaml").source == str(SCENARIO_DIR / "code.yaml")
    controller = specrl.LearnedController.load("default")
    assert controller.policy.folder == SHIPPED_POLICY_DIR / "default"
    assert specrl.LearnedController.load("policies/default").policy.folder == SHIPPED_POLICY_DIR / "default"
    action = controller.act(np.zeros(N_FEATURES, dtype=np.float32))
    assert 0 <= action.k <= controller.k_max


def test_a_path_still_wins_and_a_missing_name_lists_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "code.yaml").write_text("description: mine\nprompts: {domains: {math: 1.0}}\n")
    assert load_scenario("code.yaml").source == "code.yaml"
    assert specrl.LearnedController.load(SHIPPED_POLICY_DIR / "default").pair
    with pytest.raises(PolicyError, match=r"policy folder nope does not exist.*shipped policy: .*default"):
        specrl.LearnedController.load("nope")
    with pytest.raises(ScenarioError, match=r"scenario file 'nope' not found.*code, code_t1"):
        load_scenario("nope")
