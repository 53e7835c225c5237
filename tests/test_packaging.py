"""Package data (shipped scenarios and policies found from any working directory) and a trace-replay
simulator that starts without loading model weights."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import gymnasium
import numpy as np
import pytest

import specrl
import specrl.models
from specrl.envs import SetupError, TraceReplayEnv, load_scenario, shipped_scenarios
from specrl.envs.reward import step_reward
from specrl.envs.scenario import SCENARIO_DIR, PairSpec, ScenarioError
from specrl.export import PolicyError
from specrl.export.layout import SHIPPED_POLICY_DIR, shipped_policies
from specrl.features import N_FEATURES
from specrl.latency import LatencyModel, device_key, latency_path
from specrl.latency.store import dtype_name

REPO = Path(__file__).resolve().parent.parent


def test_shipped_data_lives_in_the_top_level_folders_and_is_package_data():
    package = Path(specrl.__file__).resolve().parent
    assert SCENARIO_DIR.parent == package and SHIPPED_POLICY_DIR.parent == package
    assert {"code", "mixed", "prose_t1"} <= set(shipped_scenarios())
    assert "default" in shipped_policies()
    # one copy: the package's folders are links to the top-level scenarios/ and policies/
    for name, folder in (("scenarios", "scenarios"), ("policies", "policies")):
        assert (package / name).is_symlink() and (package / name).resolve() == (REPO / folder).resolve()
    assert (REPO / "scenarios" / "code.yaml").is_file() and (
        REPO / "policies" / "default" / "metadata.json"
    ).is_file()
    pyproject = (REPO / "pyproject.toml").read_text()
    for pattern in ("scenarios/*.yaml", "policies/*/*", "embedded/weights/**/*", "latency/profiles/*.json"):
        assert f'"{pattern}"' in pyproject


def test_scenarios_and_policies_resolve_by_name_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert load_scenario("code").name == "code"
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
    with pytest.raises(PolicyError, match=r"policy folder nope does not exist.*shipped: .*default"):
        specrl.LearnedController.load("nope")
    listed = r"scenario file 'nope' not found.*code, code_lookup, code_pool, code_t1"
    with pytest.raises(ScenarioError, match=listed):
        load_scenario("nope")


# ---- the trace-replay simulator starts without model weights --------------------------------


@pytest.fixture
def no_weights(monkeypatch, tmp_path):
    """An empty SPECRL_HOME, and loading any model weights fails the test."""
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path / "home"))

    def refuse(*args, **kwargs):
        raise AssertionError("the simulator loaded model weights")

    monkeypatch.setattr(PairSpec, "load", refuse)
    monkeypatch.setattr(specrl.models.AutoModelForCausalLM, "from_pretrained", refuse)


def replay_a_few_steps(env) -> None:
    """A few random steps: each step's reward is the reward formula over the tokens it replayed and
    the latency model's price of that step, and the observation stays in the features' range."""
    replay = env.unwrapped
    observation, _ = env.reset(seed=0)
    assert observation.shape == (N_FEATURES,)
    env.action_space.seed(0)
    for _ in range(3):
        observation, reward, terminated, truncated, info = env.step(env.action_space.sample())
        result = info["step_result"]
        assert info["tokens"] == result.emitted >= 1 and info["seconds"] == pytest.approx(
            sum(replay.latency.seconds(result))
        )
        rho, scale = replay.reference_tokens_per_s, replay.scenario.reward.scale
        assert rho > 0 and reward == pytest.approx(step_reward(result.emitted, info["seconds"], rho, scale))
        assert ((observation >= 0) & (observation <= 1)).all()
        if terminated or truncated:
            break


def test_trace_replay_starts_on_shipped_traces_and_a_constant_latency_without_weights(no_weights):
    scenario = replace(load_scenario("code"), latency="constant")
    replay_a_few_steps(gymnasium.make("specrl/TraceReplay-v0", scenario=scenario))


def test_trace_replay_reads_a_cached_calibration_without_weights(no_weights, capsys):
    info = load_scenario("code").pair.info()
    k_max = load_scenario("code").k_max
    target = 0.01 + 0.001 * np.arange(1, k_max + 2)[:, None] * np.ones((1, 2))  # (n_max, contexts)
    model = LatencyModel(
        info.name, device_key(info.device), [0, 512], target, [0.002, 0.003], dtype=dtype_name(info.dtype)
    )
    model.save(latency_path(info))
    replay_a_few_steps(gymnasium.make("specrl/TraceReplay-v0", scenario="code"))
    assert "loading the model pair" not in capsys.readouterr().err


def test_trace_replay_never_calibrates_unasked_and_loads_the_pair_only_when_prepare_asks(no_weights, capsys):
    with pytest.raises(SetupError, match=r"needs its latency model .* `specrl calibrate`") as error:
        gymnasium.make("specrl/TraceReplay-v0", scenario="code")
    assert "prepare=True" in str(error.value) and str(latency_path(load_scenario("code").pair.info())) in str(
        error.value
    )
    assert "loading the model pair" not in capsys.readouterr().err  # nothing loaded, nothing measured
    with pytest.raises(AssertionError, match="loaded model weights"):
        gymnasium.make("specrl/TraceReplay-v0", scenario="code", prepare=True)
    assert "loading the model pair specrl-zoo-small to calibrate its latency model" in capsys.readouterr().err


def test_an_env_without_traces_names_the_command_that_records_them(no_weights, tmp_path):
    scenario = replace(load_scenario("code"), latency="constant", max_new_tokens=77)  # no traces of this
    with pytest.raises(SetupError, match=r"no 'validation' traces of scenario 'code'.*specrl collect"):
        TraceReplayEnv(scenario, split="validation")


@pytest.mark.slow
def test_pair_info_names_the_pair_as_loading_it_does(tiny_home):
    _, pair = tiny_home
    info = PairSpec(preset="tiny", device="cpu").info()
    assert (info.name, info.device, info.dtype) == (pair.name, pair.device, pair.dtype)
    assert latency_path(info) == latency_path(pair)
