"""SpecDecodeEnv: Gymnasium API, reward property, reproducibility, domain shift, scenarios."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import gymnasium
import numpy as np
import pytest
from conftest import prompts
from gymnasium.utils.env_checker import check_env as gymnasium_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import specrl
import specrl.latency
from specrl.cli import main
from specrl.envs import (
    SPEC_DECODE_ID,
    InvalidActionError,
    PromptSpec,
    RewardSpec,
    Scenario,
    ScenarioError,
    SpecDecodeEnv,
    load_scenario,
    shipped_scenarios,
)
from specrl.features import N_FEATURES
from specrl.latency import LatencyModel

REPO = Path(__file__).resolve().parent.parent
STEP_INFO_KEYS = {
    "tokens",
    "seconds",
    "tokens_per_s",
    "proposed",
    "accepted",
    "drafts",
    "k",
    "k_used",
    "tau",
    "domain",
    "segment",
    "episode_tokens",
    "episode_seconds",
    "step_result",
}
# Shipped scenarios calibrate their latency model on first use; tests use the constant one.
CONSTANT = LatencyModel.from_cost_model()


@pytest.fixture(scope="module")
def word_prompts(tmp_path_factory, pair) -> str:
    """Prompts of the random word-level pair, two domains, both splits, as a prompts file."""
    texts = [" ".join(f"w{i}" for i in ids) for ids in prompts(12, pair.vocab_size, seed=3)]
    sets = {
        "train": {"code": texts[:4], "math": texts[4:8]},
        "validation": {"code": texts[8:9], "math": texts[10:11]},
        "test": {"code": texts[9:10], "math": texts[11:]},
    }
    path = tmp_path_factory.mktemp("prompts") / "prompts.json"
    path.write_text(json.dumps(sets))
    return str(path)


def words(word_prompts: str, **changes) -> Scenario:
    """A modeled-time scenario on the random pair (fast, with real acceptance variety), with the
    constant latency model (no profiling in tests but test_latency.py)."""
    base = Scenario(
        name="words",
        prompts=PromptSpec(file=word_prompts),
        max_new_tokens=32,
        reward=RewardSpec(time="modeled"),
        latency="constant",
    )
    return replace(base, **changes)


def play(env: SpecDecodeEnv, actions, seed: int):
    """Reset with ``seed`` and step through ``actions`` (cycled) to the end; every transition."""
    observation, info = env.reset(seed=seed)
    transitions = [(observation, 0.0, info)]
    done, i = False, 0
    while not done:
        observation, reward, done, truncated, info = env.step(actions[i % len(actions)])
        assert not truncated
        transitions.append((observation, reward, info))
        i += 1
    return transitions


# ---- Gymnasium API ----------------------------------------------------------------------


@pytest.mark.slow
def test_registered_as_nondeterministic_and_made_from_a_shipped_scenario_path(tiny_home):
    _, pair = tiny_home
    assert gymnasium.spec(SPEC_DECODE_ID).nondeterministic is True
    env = gymnasium.make(SPEC_DECODE_ID, scenario="code", pair=pair, latency=CONSTANT)
    assert env.unwrapped.scenario.name == "code" and env.unwrapped.pair is pair
    assert env.unwrapped.latency is CONSTANT
    assert env.action_space == gymnasium.spaces.MultiDiscrete([9, 10])
    assert env.observation_space.shape == (N_FEATURES,)
    observation, info = env.reset(seed=0)
    assert observation in env.observation_space and info["domain"] == "code"
    observation, *_ = env.step(np.array([2, 0]))
    assert observation in env.observation_space


def test_made_from_a_config_object(word_prompts, pair):
    scenario = words(word_prompts, k_max=3, tau_grid=(0.0, 0.5))
    env = gymnasium.make(SPEC_DECODE_ID, scenario=scenario, pair=pair)
    assert env.action_space == gymnasium.spaces.MultiDiscrete([4, 2])
    env.reset(seed=0)
    *_, info = env.step(np.array([3, 1]))
    assert info["k"] == 3 and info["tau"] == 0.5


@pytest.mark.parametrize("time", ["modeled", "wallclock"])
def test_passes_gymnasium_and_sb3_checkers_without_warnings(word_prompts, pair, time):
    scenario = words(word_prompts, sampling=specrl.SamplingConfig(temperature=1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        made = gymnasium.make(SPEC_DECODE_ID, scenario=scenario, pair=pair, time=time)
        gymnasium_check_env(made.unwrapped)
        sb3_check_env(made)
        if time == "modeled":  # without the registered spec, the checker also asserts step determinism
            gymnasium_check_env(SpecDecodeEnv(scenario, pair=pair, time=time), skip_render_check=True)


def test_invalid_actions_raise_a_clear_error(word_prompts, pair):
    env = SpecDecodeEnv(words(word_prompts), pair=pair)
    env.reset(seed=0)
    for action in ([9, 0], [0, 10], [-1, 0], [1.5, 0], [1, 2, 3], 4, np.array([[1, 1]])):
        with pytest.raises(InvalidActionError, match=r"0 <= k <= 8 and 0 <= tau_index < 10"):
            env.step(action)
    with pytest.raises(InvalidActionError, match="exceeds this scenario's k_max = 8"):
        env.step(specrl.Action(9, 0.3))
    *_, info = env.step(specrl.Action(2, 0.33))  # baselines may use a tau off the grid
    assert info["tau"] == 0.33


def test_step_needs_a_reset_and_a_running_episode(word_prompts, pair):
    env = SpecDecodeEnv(words(word_prompts, max_new_tokens=3), pair=pair)
    with pytest.raises(RuntimeError, match="reset"):
        env.step([1, 0])
    play(env, [[0, 0]], seed=0)
    with pytest.raises(RuntimeError, match="episode is over"):
        env.step([1, 0])


def test_step_info_reports_the_step(word_prompts, pair):
    env = SpecDecodeEnv(words(word_prompts), pair=pair)
    _, reset_info = env.reset(seed=1)
    assert set(reset_info) >= {
        "domain",
        "prompt_index",
        "prompt",
        "split",
        "prompt_tokens",
        "generation_seed",
    }
    _, reward, _, _, info = env.step(np.array([4, 0]))
    assert set(info) >= STEP_INFO_KEYS
    result = info["step_result"]
    assert isinstance(result, specrl.StepResult)
    assert info["tokens"] == result.emitted and info["proposed"] == result.proposed
    assert info["accepted"] == result.accepted and info["drafts"] == int(result.proposed > 0)
    cost = env.scenario.cost_model
    draft_seconds = cost.draft_forward_s * len(result.confidences)
    verify_seconds = cost.target_forward_s + cost.target_per_token_s * result.proposed
    assert info["seconds"] == pytest.approx(draft_seconds + verify_seconds)
    assert info["tokens_per_s"] == pytest.approx(info["tokens"] / info["seconds"])
    assert env.reference_tokens_per_s == pytest.approx(1 / cost.target_forward_s)
    assert reward == pytest.approx(info["tokens"] - env.reference_tokens_per_s * info["seconds"])


# ---- reward and reproducibility -------------------------------------------------------------


@pytest.mark.parametrize("pair_name", ["pair", "twin_pair"])  # speculation loses / wins
def test_episode_return_sums_tokens_minus_rho_times_modeled_time_over_steps(word_prompts, request, pair_name):
    """Each step's reward is (n_t - rho * dt_t) / scale with the step's own tokens and modeled
    seconds, rho the latency model's plain decoding (not wall time, not a constant)."""
    pair, scale = request.getfixturevalue(pair_name), 2.0
    scenario = words(word_prompts, max_new_tokens=48, reward=RewardSpec(time="modeled", scale=scale))
    env = SpecDecodeEnv(scenario, pair=pair)
    rho = env.latency.plain_tokens_per_s
    assert env.reference_tokens_per_s == pytest.approx(rho)
    for k, tau in [(0, 0.0), (2, 0.0), (8, 0.6)]:
        env.reset(seed=0)
        done, rewards, expected, seconds = False, [], [], 0.0
        while not done:
            _, reward, done, _, info = env.step(specrl.Action(k, tau))
            result = info["step_result"]
            modeled = sum(
                env.latency.step_seconds(result.context_length, result.draft_forwards, result.proposed)
            )
            assert info["seconds"] == pytest.approx(modeled)
            rewards.append(reward)
            expected.append((result.emitted - rho * modeled) / scale)
            seconds += modeled
        np.testing.assert_allclose(rewards, expected, rtol=1e-6)
        assert info["episode_seconds"] == pytest.approx(seconds)


def test_modeled_episodes_are_reproducible_for_a_seed(word_prompts, pair):
    scenario = words(word_prompts, sampling=specrl.SamplingConfig(temperature=1.0))
    actions = [np.array([k, t]) for k, t in [(3, 0), (0, 0), (5, 2), (1, 7), (8, 1)]]
    first = play(SpecDecodeEnv(scenario, pair=pair), actions, seed=7)
    again = play(SpecDecodeEnv(scenario, pair=pair), actions, seed=7)
    assert len(first) == len(again)
    for (obs_a, reward_a, info_a), (obs_b, reward_b, info_b) in zip(first, again, strict=True):
        assert np.array_equal(obs_a, obs_b) and reward_a == reward_b and info_a == info_b
    other = play(SpecDecodeEnv(scenario, pair=pair), actions, seed=8)
    tokens = [[info["step_result"].tokens for _, _, info in run[1:]] for run in (first, other)]
    assert tokens[0] != tokens[1]


def test_reset_draws_from_the_split_and_honours_options(word_prompts, pair):
    both = PromptSpec(domains={"code": 1, "math": 1}, file=word_prompts)
    env = SpecDecodeEnv(words(word_prompts, prompts=both), pair=pair, split="train")
    sets = json.loads(Path(word_prompts).read_text())["train"]
    seen = set()
    for seed in range(12):
        _, info = env.reset(seed=seed)
        assert info["split"] == "train" and info["prompt"] in sets[info["domain"]]
        seen.add(info["domain"])
    assert seen == {"code", "math"}
    _, info = env.reset(seed=0, options={"domain": "math", "prompt_index": 1})
    assert info["prompt"] == sets["math"][1]
    for split in ("validation", "test"):
        env = SpecDecodeEnv(words(word_prompts, prompts=both), pair=pair, split=split)
        _, info = env.reset(seed=0, options={"domain": "math", "prompt_index": 0})
        expected = json.loads(Path(word_prompts).read_text())[split]["math"][0]
        assert info["split"] == split and info["prompt"] == expected
    with pytest.raises(ValueError, match="prompt_index=5 out of range"):
        env.reset(options={"domain": "math", "prompt_index": 5})
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"temperature": 1})


def test_domain_shift_appends_a_prompt_of_the_new_domain_mid_episode(word_prompts, pair):
    scenario = words(
        word_prompts,
        max_new_tokens=40,
        stop_at_eos=False,
        shift=(specrl.envs.DomainShift(after_tokens=16, domain="math"),),
    )
    env = SpecDecodeEnv(scenario, pair=pair)
    math_prompts = json.loads(Path(word_prompts).read_text())["train"]["math"]
    transitions = play(env, [np.array([3, 0])], seed=0)
    steps = [info for _, _, info in transitions[1:]]
    domains = [info["domain"] for info in steps]
    switch = domains.index("math")
    assert set(domains[:switch]) == {"code"} and set(domains[switch:]) == {"math"}
    assert steps[switch - 1]["episode_tokens"] == 16 and steps[-1]["episode_tokens"] == 40
    before, after = steps[switch - 1]["step_result"], steps[switch]["step_result"]
    appended = after.context_length - (before.context_length + before.emitted)
    assert appended in {len(pair.encode("\n" + text)) for text in math_prompts}
    context = specrl.FEATURE_NAMES.index("context_fraction")
    assert transitions[switch][0][context] == pytest.approx(after.context_length / pair.context_length)
    assert transitions[switch][0][specrl.FEATURE_NAMES.index("progress")] == pytest.approx(16 / 40)


def test_mixed_shipped_scenario_draws_every_domain_of_the_embedded_pair(tiny_home):
    _, pair = tiny_home
    env = SpecDecodeEnv("mixed", pair=pair, split="test", latency=CONSTANT)
    domains = {env.reset(seed=seed)[1]["domain"] for seed in range(20)}
    assert domains == {"code", "prose", "math"}


# ---- scenarios -----------------------------------------------------------------------------


def test_shipped_scenarios_cover_every_domain_greedy_and_at_temperature_1():
    names = set(shipped_scenarios())
    for base in ("code", "prose", "math", "mixed", "code_to_math"):
        assert {base, f"{base}_t1"} <= names
        assert load_scenario(base).sampling.temperature == 0.0
        assert load_scenario(f"{base}_t1").sampling.temperature == 1.0
    assert load_scenario("mixed").domains == ["code", "prose", "math"]
    shift = load_scenario("code_to_math").shift
    assert [(s.after_tokens, s.domain) for s in shift] == [(64, "math")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tau_grd: [0.0, 0.5]", r"unknown key 'tau_grd' in the top level\. Did you mean 'tau_grid'\?"),
        ("reward: {tme: modeled}", r"unknown key 'reward\.tme'.*Did you mean 'time'\?"),
        ("sampling: {temprature: 1.0}", r"unknown key 'sampling\.temprature'.*Did you mean 'temperature'\?"),
        ("source: other.yaml", r"unknown key 'source' in the top level"),
        ('k_max: "8"', r"'k_max' must be an integer, got '8'"),  # strict: no text for a number
        ("tau_grid: [0.0, half]", r"'tau_grid\[1\]' must be a number, got 'half'"),
        ("k_max: eight", r"'k_max' must be an integer, got 'eight'"),
        ("sampling: {temperature: -1}", r"temperature must be >= 0"),
        ("reward: {time: wall}", r"reward\.time must be one of \('wallclock', 'modeled'\)"),
        ("tau_grid: [0.5, 0.1]", r"strictly increasing"),
        (
            "max_new_tokens: 32\nshift: [{after_tokens: 64, domain: math}]",
            r"after_tokens must .* between 0 and "
            r"max_new_tokens \(32\)",
        ),
        ("shift: [{after_tokens: 64}]", r"'shift\[0\]' is missing \['domain'\]"),
        ("pair: {preset: tiny, target: a, draft: b}", r"either 'preset' or 'target' and 'draft'"),
        ("prompts: {domains: {code: -1}}", r"prompts\.domains\.code: a weight must be a number >= 0"),
        ("prompts: {split: testing}", r"prompts\.split must be one of \('train', 'validation', 'test'\)"),
        ("- just a list", r"the top level must be a mapping"),
        ("k_max: [1", r"not valid YAML"),
        (
            "latency: calibrate",
            r"latency must be one of \('calibrated', 'constant'\) or the path of a latency "
            r"\.json file",
        ),
        ("latency: 1", r"'latency' must be a string, got 1"),
    ],
)
def test_invalid_scenario_files_are_refused_naming_file_and_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=message) as error:
        load_scenario(path)
    assert str(path) in str(error.value)


def test_missing_scenario_file_names_the_shipped_ones():
    listed = r"scenario file 'envs/cod\.yaml' not found.*code, code_lookup, code_pool, code_t1"
    with pytest.raises(ScenarioError, match=listed):
        load_scenario("envs/cod.yaml")
    with pytest.raises(ScenarioError, match="not found"):
        gymnasium.make(SPEC_DECODE_ID, scenario="no_such_scenario")
    assert load_scenario("arrivals").batch.arrivals


def test_prompts_the_pair_lacks_are_refused_when_the_env_is_built(tmp_path, word_prompts, pair, tiny_home):
    with pytest.raises(ScenarioError, match=r"no 'train' prompts of domain 'prose'.*\['code', 'math'\]"):
        SpecDecodeEnv(words(word_prompts, prompts=PromptSpec({"prose": 1}, file=word_prompts)), pair=pair)
    with pytest.raises(ScenarioError, match="has no prompt sets.*set prompts.file"):
        SpecDecodeEnv(Scenario(), pair=pair)  # a pair loaded from paths ships no prompts
    (tmp_path / "scenario.yaml").write_text("prompts: {file: missing.json}")
    with pytest.raises(ScenarioError, match=r"prompts\.file '.*missing\.json' does not exist"):
        SpecDecodeEnv(tmp_path / "scenario.yaml", pair=tiny_home[1])


# ---- specrl compare (the real loop's quick look) ----------------------------------------------------


@pytest.mark.slow
def test_specrl_compare_runs_every_controller_on_shipped_scenarios(tiny_home, tmp_path, capsys, monkeypatch):
    # The shipped scenarios' `latency: calibrated`, without profiling: the constant model.
    monkeypatch.setattr(specrl.latency, "calibrated", lambda pair, **_: CONSTANT)
    code = main(
        [
            "compare",
            "--preset",
            "tiny",
            "--device",
            "cpu",
            "--time",
            "modeled",
            "--episodes",
            "2",
            "--warmup",
            "0",
            "--max-new-tokens",
            "72",
            "--scenarios",
            "code",
            "code_to_math_t1",
            "--json",
            str(tmp_path / "r.json"),
        ]
    )
    results = json.loads((tmp_path / "r.json").read_text())
    assert code == 0
    expected = {"static:0", "static:4", "tcp", "tcp-tau0.25", "hf-heuristic", "hf-confidence"}
    for name in ("code", "code_to_math_t1"):
        assert set(results[name]["controllers"]) == expected
        plain = results[name]["controllers"]["static:0"]
        assert plain["tokens_per_s"] == pytest.approx(1 / 0.009) and plain["mean_k"] == 0
        assert results[name]["controllers"]["static:4"]["mean_k"] == 4
    printed = capsys.readouterr().out
    assert "### code_to_math_t1 (modeled time)" in printed and "| hf-confidence |" in printed
