"""The latency model: interpolation, tables, the step formula, the file format, the cache, wiring."""

from __future__ import annotations

import importlib.util
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from conftest import prompts

import specrl
import specrl.latency
from specrl.envs import (
    CostModel,
    PromptSpec,
    RewardSpec,
    Scenario,
    ScenarioError,
    SpecDecodeEnv,
    load_scenario,
)
from specrl.latency import (
    LATENCY_FORMAT_VERSION,
    LatencyError,
    LatencyModel,
    calibrated,
    default_contexts,
    device_key,
    heldout_contexts,
    latency_path,
    profile,
)

REPO = Path(__file__).resolve().parent.parent
GRID = [8, 40, 100]


@pytest.fixture(scope="module")
def measured(pair) -> LatencyModel:
    """A real profile of the random pair: 3 contexts (+ 2 held-out), k_max 3, 2 repeats."""
    return profile(pair, k_max=3, contexts=GRID, repeats=2, progress=False)


@pytest.fixture
def known() -> LatencyModel:
    """A hand-written table: contexts 10 and 20, n = 1 and 2."""
    return LatencyModel("p", "d", [10, 20], [[1.0, 2.0], [3.0, 5.0]], [0.1, 0.3])


def no_profile(*args, **kwargs):
    raise AssertionError("profile() was called")


def quick_profile(calls: list):
    """A stand-in for ``profile`` that records its calls and measures a tiny grid."""

    def run(pair, *, k_max=8, contexts=None, repeats=5, progress=True):
        calls.append(k_max)
        return profile(pair, k_max=k_max, contexts=[8, 40], repeats=1, progress=False)

    return run


# ---- the model ----------------------------------------------------------------------------------


def test_interpolation_is_exact_on_the_grid_linear_between_clamped_outside(known):
    assert known.target_seconds(1, 10) == 1.0 and known.target_seconds(2, 20) == 5.0
    assert known.target_seconds(1, 15) == pytest.approx(1.5)
    assert known.target_seconds(2, 12) == pytest.approx(3.4)
    assert known.draft_seconds(15) == pytest.approx(0.2) and known.draft_seconds(20) == 0.3
    assert known.target_seconds(1, 0) == 1.0 and known.target_seconds(2, 10_000) == 5.0
    assert known.draft_seconds(3) == 0.1
    assert known.target_seconds(0, 15) == 0.0  # no forward
    assert known.target_seconds(4, 20) == pytest.approx(5.0 + 2 * 3.0)  # linear in n beyond the table
    with pytest.raises(ValueError, match="context_length must be >= 0"):
        known.draft_seconds(-1)
    with pytest.raises(ValueError, match="new_tokens must be >= 0"):
        known.target_seconds(-1, 10)


def test_step_seconds_is_draft_forwards_times_draft_plus_one_verify(known):
    assert known.step_seconds(15, 3, 2) == (3 * known.draft_seconds(15), known.target_seconds(3, 15))
    assert known.step_seconds(20, 0, 0) == (0.0, 2.0)
    # A tau-stopped step: 3 draft forwards (the stopped one included), 2 proposals.
    result = specrl.StepResult(
        action=specrl.Action(4, 0.5),
        k=4,
        proposed=2,
        accepted=1,
        emitted=2,
        draft_seconds=9.0,
        verify_seconds=9.0,
        confidences=[0.9, 0.8, 0.1],
        stopped_by_tau=True,
        context_length=12,
    )
    assert known.seconds(result) == (3 * known.draft_seconds(12), known.target_seconds(3, 12))
    assert known.seconds(result)[0] == pytest.approx(3 * (0.1 + 0.2 * 0.2))


def test_tables_equal_the_scalar_methods_exactly_and_are_cached(measured, pair):
    window, widest = pair.context_length, measured.n_max + 2  # past the measured n too
    target, draft = measured.tables(window, widest)
    assert target.shape == (widest + 1, window + 1) and draft.shape == (window + 1,)
    assert not target[0].any()
    for n in range(widest + 1):
        for context in range(window + 1):
            assert target[n, context] == measured.target_seconds(n, context)
    assert all(draft[context] == measured.draft_seconds(context) for context in range(window + 1))
    assert measured.tables(window, widest)[0] is target
    with pytest.raises(ValueError, match="read-only"):
        target[1, 1] = 0.0


def test_profile_measures_the_grid_and_reports_heldout_error(measured, pair):
    assert measured.kind == "measured" and measured.pair == pair.name
    assert measured.device == device_key("cpu") and measured.dtype == "float32"
    assert measured.contexts == tuple(GRID) and measured.n_max == 4
    table = measured.target_table
    assert (np.diff(table, axis=0) >= 0).all() and (np.diff(table, axis=1) >= 0).all(), "monotone fit"
    assert (np.diff(measured.draft_table) >= 0).all()
    assert [measured.target_seconds(n, c) for n in (1, 4) for c in GRID] == [*table[0], *table[3]]
    error = measured.fit_error
    assert error["contexts"] == [24, 70] == heldout_contexts(GRID)
    assert np.array(error["target_seconds"]).shape == (4, 2) and len(error["draft_seconds"]) == 2
    for part in ("target", "draft"):
        assert 0 <= error[part]["median"] <= error[part]["max"]
    assert measured.plain_tokens_per_s == pytest.approx(1 / measured.target_seconds(1, 256))
    assert "repeats" in measured.measurement and "included" in measured.measurement


def test_monotone_fit_averages_a_noisy_spike_instead_of_carrying_it():
    fitted = specrl.latency._isotonic(np.array([1.0, 4.0, 2.0, 3.0, 5.0]))
    assert fitted.tolist() == pytest.approx([1.0, 3.0, 3.0, 3.0, 5.0])
    assert specrl.latency._isotonic(np.array([2.0, 1.0])).tolist() == [1.5, 1.5]


def test_profile_refuses_contexts_outside_the_window(pair):
    with pytest.raises(ValueError, match=r"contexts must lie in 1\.\.247"):
        profile(pair, k_max=8, contexts=[16, 250], progress=False)
    with pytest.raises(ValueError, match="k_max must be >= 1"):
        profile(pair, k_max=0, progress=False)


def test_default_grid_doubles_up_to_the_usable_window():
    assert default_contexts(1024, 8) == [16, 32, 64, 128, 256, 512, 1015]
    assert default_contexts(100_000, 8)[-1] == 4096
    assert heldout_contexts([16, 32, 33]) == [24]


def test_constant_model_follows_the_cost_model():
    cost = CostModel(draft_forward_s=0.001, target_forward_s=0.01, target_per_token_s=0.002)
    model = LatencyModel.from_cost_model(cost)
    assert model.kind == "constant"
    for context in (0, 7, 300, 5000):
        assert model.draft_seconds(context) == pytest.approx(0.001)
        for n in range(1, 12):
            assert model.target_seconds(n, context) == pytest.approx(0.01 + 0.002 * (n - 1))
    assert model.plain_tokens_per_s == pytest.approx(100.0)
    assert LatencyModel.from_cost_model().plain_tokens_per_s == pytest.approx(1 / 0.009)


def test_device_key_is_stable_and_filename_safe():
    key = device_key("cpu")
    assert key == device_key("cpu") and re.fullmatch(r"cpu-[a-z0-9.-]+-\d+threads", key)


# ---- the file --------------------------------------------------------------------------------------


def test_save_and_load_round_trip(measured, tmp_path):
    path = tmp_path / "sub" / "latency.json"
    measured.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["latency.json"], "no temporary file left"
    loaded = LatencyModel.load(path)
    assert loaded.to_dict() == measured.to_dict()
    assert np.array_equal(loaded.tables(256, 9)[0], measured.tables(256, 9)[0])
    data = json.loads(path.read_text())
    assert data["version"] == LATENCY_FORMAT_VERSION and data["batch_size"] == 1


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(version=99), r"latency format version 99, but this specrl reads version 1"),
        (lambda d: d.pop("draft_seconds"), r"missing key\(s\) \['draft_seconds'\]"),
        (lambda d: d.update(format="other"), r"not a specrl latency file"),
        (lambda d: d.update(batch_size=4), r"batch_size 4 is not supported"),
        (lambda d: d.update(draft_seconds=[0.1]), r"draft_seconds must have one value per context \(3\)"),
        (lambda d: d.update(contexts=[8, 8, 100]), r"strictly increasing"),
        (lambda d: d["target_seconds"][0].__setitem__(0, -1.0), r"target_seconds must be finite and > 0"),
        (lambda d: d.update(new_tokens=[1, 2]), r"'new_tokens' must be \[1, \.\.\., n_max\]"),
    ],
)
def test_invalid_files_raise_latency_error_naming_file_and_problem(measured, tmp_path, change, message):
    data = measured.to_dict()
    change(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LatencyError, match=message) as error:
        LatencyModel.load(path)
    assert str(path) in str(error.value) and "calibrate.py" in str(error.value)


def test_missing_and_corrupt_files_raise_latency_error(tmp_path):
    with pytest.raises(LatencyError, match=r"'.*nothing\.json' does not exist.*calibrate\.py"):
        LatencyModel.load(tmp_path / "nothing.json")
    (tmp_path / "torn.json").write_text('{"format": "specrl-latency", "vers')
    with pytest.raises(LatencyError, match=r"torn\.json: not valid JSON"):
        LatencyModel.load(tmp_path / "torn.json")


# ---- the cache ---------------------------------------------------------------------------------------


def test_calibrated_profiles_once_then_reads_the_cache(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(specrl.latency, "profile", quick_profile(calls))
    first = calibrated(pair, k_max=2, progress=False)
    path = latency_path(pair)
    assert calls == [2] and path.is_file() and path.parent == tmp_path / "latency"
    assert device_key(pair.device) in path.name and "float32" in path.name
    monkeypatch.setattr(specrl.latency, "profile", no_profile)
    again = calibrated(pair, k_max=2, progress=False)
    assert again.to_dict() == first.to_dict()
    assert calibrated(pair, k_max=1, progress=False).to_dict() == first.to_dict()  # covers fewer n too

    monkeypatch.setattr(specrl.latency, "profile", quick_profile(calls))
    calibrated(pair, k_max=4, progress=False)  # the cache covers n <= 3 only: measured again
    calibrated(pair, k_max=4, recalibrate=True, progress=False)
    path.write_text("{")
    with pytest.warns(UserWarning, match="not valid JSON.*profiling again"):
        calibrated(pair, k_max=4, progress=False)
    assert calls == [2, 4, 4, 4]
    assert LatencyModel.load(path).n_max == 5


# ---- the scenario key and the env ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def prompt_file(tmp_path_factory, pair) -> str:
    texts = [" ".join(f"w{i}" for i in ids) for ids in prompts(4, pair.vocab_size, seed=5)]
    path = tmp_path_factory.mktemp("latency-prompts") / "prompts.json"
    path.write_text(json.dumps({"train": {"code": texts}}))
    return str(path)


def test_scenario_latency_key_constant_path_and_calibrated(pair, measured, tmp_path, monkeypatch):
    assert Scenario().latency == "calibrated"
    measured.save(tmp_path / "models" / "lat.json")
    (tmp_path / "s.yaml").write_text("latency: models/lat.json\nk_max: 3")
    scenario = load_scenario(tmp_path / "s.yaml")
    assert scenario.latency == str(tmp_path / "models" / "lat.json")  # relative to the file
    assert scenario.latency_model(pair).to_dict() == measured.to_dict()
    with pytest.raises(ScenarioError, match=r"covers verifies of up to 4 tokens but k_max = 8 needs 9"):
        replace(scenario, k_max=8).latency_model(pair)
    LatencyModel.from_dict({**measured.to_dict(), "pair": "other"}).save(tmp_path / "models" / "lat.json")
    with pytest.raises(ScenarioError, match=r"measured for pair 'other'"):
        scenario.latency_model(pair)

    constant = Scenario(latency="constant", cost_model=CostModel(target_forward_s=0.02)).latency_model(pair)
    assert constant.kind == "constant" and constant.plain_tokens_per_s == pytest.approx(50.0)

    monkeypatch.setenv("SPECRL_HOME", str(tmp_path / "home"))
    calls = []
    monkeypatch.setattr(specrl.latency, "profile", quick_profile(calls))
    assert Scenario(k_max=2).latency_model(pair, progress=False).n_max == 3 and calls == [2]
    with pytest.raises(ValueError, match=r"latency must be one of \('calibrated', 'constant'\) or the path"):
        Scenario(latency="fast")


def test_env_modeled_seconds_and_rho_come_from_the_injected_model(pair, measured, prompt_file, monkeypatch):
    monkeypatch.setattr(specrl.latency, "profile", no_profile)  # the scenario's own is never built
    modeled = RewardSpec(time="modeled")
    scenario = Scenario(prompts=PromptSpec(file=prompt_file), max_new_tokens=24, reward=modeled)
    env = SpecDecodeEnv(scenario, pair=pair, latency=measured)
    assert env.latency is measured and env.reference_tokens_per_s == measured.plain_tokens_per_s
    env.reset(seed=0)
    done, steps = False, 0
    while not done:
        _, reward, done, _, info = env.step(np.array([steps % 5, 0]))
        result = info["step_result"]
        draft, verify = measured.seconds(result)
        assert (result.draft_seconds, result.verify_seconds) == (draft, verify)
        assert info["seconds"] == draft + verify
        assert reward == pytest.approx(info["tokens"] - measured.plain_tokens_per_s * info["seconds"])
        steps += 1
    assert steps > 3

    wallclock = replace(scenario, reward=RewardSpec(time="wallclock", reference_tokens_per_s=100.0))
    env = SpecDecodeEnv(wallclock, pair=pair)  # rho is given and time is measured: no model needed
    assert env.latency is None and env.reference_tokens_per_s == 100.0


# ---- the script ----------------------------------------------------------------------------------------


def test_calibrate_script_writes_json_and_markdown(pair, tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("calibrate", REPO / "experiments/calibrate.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    target, draft = pair.name.split("+")
    out = tmp_path / "lat.json"
    args = [
        "--target",
        target,
        "--draft",
        draft,
        "--device",
        "cpu",
        "--k-max",
        "2",
        "--repeats",
        "1",
        "--contexts",
        "8",
        "40",
        "--out",
        str(out),
    ]
    model = script.main(args)
    assert LatencyModel.load(out).to_dict() == model.to_dict() and model.n_max == 3
    table = out.with_suffix(".md").read_text()
    assert "| n \\ context | 8 | 40 |" in table and "Held-out fit error (relative, at contexts [24])" in table
    assert table in capsys.readouterr().out
    again = script.main(args)  # exists: reported, not measured again
    assert again.to_dict() == model.to_dict() and "exists; reporting it" in capsys.readouterr().out
