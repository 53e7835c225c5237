"""The pieces of specrl.training that experiments/train_ppo.py and train_batch.py call: typed
comparison rows and their tables, the run folder, the resolved config and the shared action
space. The whole run, end to end, is tests/test_train.py's."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import replace

import pytest
import yaml

from specrl.envs import load_scenario
from specrl.evaluation.intervals import RatioInterval
from specrl.evaluation.real_loop_check import RealLoopRow, real_loop_table
from specrl.training.comparison import (
    Bar,
    SimulatorRow,
    StaticSetting,
    comparison_table,
    stored_results,
)
from specrl.training.inputs import REAL_ENVS, ActionSpace, ActionSpaceError, named_policies, resolve_config
from specrl.training.mix import envs_per_scenario
from specrl.training.run_folder import (
    RUN_CONFIG,
    RUN_RECORD,
    new_run_dir,
    read_run_record,
    resumed_state,
    write_run_record,
)


def bar(k: int = 4, tau: float = 0.0, drafter: str = "draft", tuned: dict | None = None) -> Bar:
    """A bar whose rules are never built here (no predictor needed)."""
    return Bar(StaticSetting(k, tau, drafter), 100.0, tuned or {}, predictor=None)


def row(ppo: float, pool_rule: float | None = None, **changes: float) -> SimulatorRow:
    tokens = {
        "plain": 50.0,
        "tcp": 80.0,
        "hf-heuristic": 95.0,
        "static": 100.0,
        "adaedl": 70.0,
        "specdec++": 99.0,
        **({"pool-rule": pool_rule} if pool_rule is not None else {}),
        "ppo": ppo,
        "oracle": 200.0,
        **changes,
    }
    return SimulatorRow(tokens, bar())


def test_a_row_is_stored_under_the_label_keys_and_its_ratios_read_back_the_same():
    simulated = row(110.0)
    stored = simulated.stored()
    assert list(stored) == [
        "plain",
        "tcp",
        "hf-heuristic",
        "best static (k=4, tau=0.0)",
        "adaedl",
        "specdec++",
        "ppo",
        "oracle",
    ]
    ratios = simulated.ratios()
    assert ratios == pytest.approx({"tcp": 110 / 80, "best static": 1.1, "best rule": 1.1, "oracle": 0.55})


def test_the_best_rule_is_the_fastest_rule_of_the_row_or_the_best_static_setting():
    assert row(110.0, pool_rule=120.0).ratios()["best rule"] == pytest.approx(110 / 120)
    assert row(110.0, **{"hf-heuristic": 105.0}).ratios()["best rule"] == pytest.approx(110 / 105)
    assert row(110.0).ratios()["best rule"] == pytest.approx(110 / 100)  # the static setting


def test_a_static_label_names_the_drafter_only_when_it_is_not_the_draft():
    assert StaticSetting(3, 0.1).label() == "(k=3, tau=0.1)"
    assert StaticSetting(3, 0.1, "ngram").label() == "(k=3, tau=0.1, ngram)"
    pooled = SimulatorRow(row(1.0).tokens_per_s, bar(2, 0.0, "draft-mid"))
    assert "best static (k=2, tau=0.0, draft-mid)" in pooled.stored()


def test_the_comparison_table_has_a_column_per_role_and_a_dash_where_a_scenario_lacks_one():
    table = comparison_table({"code": row(110.0), "code_pool": row(90.0, pool_rule=120.0)})
    header, _, code, pool = table.splitlines()
    assert header == (
        "| scenario | plain | tcp | hf-heuristic | adaedl | specdec++ | pool-rule | ppo | best static "
        "| oracle | PPO / TCP | PPO / best static | PPO / best rule | PPO / oracle |"
    )
    assert code == (
        "| code | 50.0 | 80.0 | 95.0 | 70.0 | 99.0 | - | 110.0 | 100.0 (k=4, tau=0.0) | 200.0 "
        "| 1.375 | 1.100 | 1.100 | 0.550 |"
    )
    assert pool.split(" | ")[6:8] == ["120.0", "90.0"] and pool.endswith("| 0.750 | 0.450 |")


def test_the_stored_results_hold_every_row_and_the_geometric_mean_over_the_trained_scenarios():
    rows = {"a": row(160.0), "b": row(40.0), "unseen": row(800.0)}
    results = stored_results(rows, ["a", "b"])
    assert results["ratio_vs_tcp_sim_test"] == pytest.approx(1.0)  # sqrt(2 * 0.5); "unseen" left out
    assert results["sim_test_tokens_per_s"] == {name: r.stored() for name, r in rows.items()}


def test_the_real_loop_table_names_the_best_rule_and_shows_paired_ratios():
    fast_static = RealLoopRow(
        {"plain": 50.0, "tcp": 80.0, "hf-heuristic": 60.0, "adaedl": 70.0, "specdec++": 75.0, "static": 90.0}
        | {"ppo": 85.0},
        {"plain": 1.7, "tcp": 1.06, "hf-heuristic": 1.4, "adaedl": 1.2, "specdec++": 1.1, "static": 0.95},
        StaticSetting(5, 0.0),
        {
            "plain": RatioInterval(1.7, 1.5, 1.9, 4),
            "tcp": RatioInterval(1.06, 1.01, 1.09, 4),
            "static": RatioInterval(0.95, 0.94, 0.961, 4),
        },
        {},  # the per-repeat speeds: only a policy run alongside reads them
    )
    fast_tcp = replace(fast_static, tokens_per_s=fast_static.tokens_per_s | {"tcp": 95.0})
    one_repeat = replace(fast_static, intervals={"static": RatioInterval(0.95, None, None, 1)})
    assert fast_static.best_rule() == "static" and fast_tcp.best_rule() == "tcp"
    table = real_loop_table({"code": fast_static, "prose": fast_tcp, "math": one_repeat})
    header, _, first, second, third = table.splitlines()
    assert header == (
        "| scenario | plain | tcp | hf-heuristic | adaedl | specdec++ | best static | PPO | PPO / plain "
        "| PPO / TCP | PPO / best static | PPO / best rule (which) | its 95% interval |"
    )
    assert first.endswith(
        "| 90.0 (k=5, tau=0.0) | 85.0 | 1.700 | 1.060 | 0.950 | 0.950 (static) | [0.940, 0.961] n=4 |"
    )
    assert second.endswith("| 1.060 (tcp) | [1.010, 1.090] n=4 |")  # the best rule's
    assert third.endswith("| 0.950 (static) | [-] n=1 |")  # one repeat: no interval


def test_run_folders_are_named_like_cleanrls_runs_and_unique_ones_do_not_collide(tmp_path):
    plain = new_run_dir(tmp_path / "runs", "mix", "ppo", 3)
    assert plain.is_dir() and plain.parent == tmp_path / "runs"
    label, experiment, seed, stamp = plain.name.split("__")
    assert (label, experiment, seed) == ("mix", "ppo", "3") and stamp.isdigit()
    first, second = (new_run_dir(tmp_path / "runs", "batch_mix", "train_batch", 0, unique=True) for _ in "ab")
    assert first != second and first.is_dir() and second.is_dir()
    assert first.name.startswith("batch_mix__train_batch__0__")


def test_the_run_record_is_written_twice_alike_and_read_back(tmp_path):
    assert read_run_record(tmp_path) is None  # a folder from before run.json
    record = {"seed": 1, "grid": (0.0, 0.5), "path": tmp_path, "scenarios": {"code": {"k_max": 8}}}
    write_run_record(tmp_path, record)
    stored = read_run_record(tmp_path)
    assert stored == yaml.safe_load((tmp_path / RUN_CONFIG).read_text())
    assert stored["grid"] == [0.0, 0.5] and stored["path"] == str(tmp_path)
    assert (tmp_path / RUN_RECORD).is_file()


def test_a_resumed_run_keeps_the_progress_of_its_first_session(tmp_path):
    (tmp_path / "state.json").write_text(json.dumps({"timesteps": 4096, "best_ratio_vs_tcp": 1.1}))
    (tmp_path / "progress.csv").write_text("time/total_timesteps\n2048\n4096\n")
    state = resumed_state(tmp_path)
    assert state["timesteps"] == 4096 and state["best_ratio_vs_tcp"] == 1.1
    assert not (tmp_path / "progress.csv").exists()
    assert (tmp_path / "progress-until-4096.csv").read_text().endswith("4096\n")


def test_the_config_takes_the_command_lines_overrides_and_one_env_per_core_in_the_real_loop(tmp_path):
    path = tmp_path / "ppo.yaml"
    config = {"ppo": {"gamma": 0.99}, "train": {"total_timesteps": 1000, "n_envs": 128, "eval_freq": 500}}
    path.write_text(yaml.safe_dump(config))
    overrides = {"total_timesteps": 64, "n_envs": None, "eval_freq": None}
    hyper, budget = resolve_config(path, real_loop=False, overrides=overrides)
    assert hyper == {"gamma": 0.99} and budget == {
        "total_timesteps": 64,
        "n_envs": 128,
        "eval_freq": 500,
        "demonstrations": "selection",  # the defaults of the keys a config may leave out
        "kl_to_clone": 0.0,
    }
    _, real = resolve_config(path, real_loop=True, overrides=overrides)
    assert real["n_envs"] == min(REAL_ENVS, os.cpu_count() or 1)
    _, forced = resolve_config(path, real_loop=True, overrides={"n_envs": 3})
    assert forced["n_envs"] == 3  # the command line wins


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"demonstrations": "everywhere"}, "train.demonstrations must be one of"),
        ({"kl_to_clone": -0.5}, ">= 0"),
    ],
)
def test_a_config_with_a_bad_warm_start_setting_is_refused(tmp_path, bad, message):
    path = tmp_path / "ppo.yaml"
    path.write_text(yaml.safe_dump({"ppo": {"gamma": 0.99}, "train": {"total_timesteps": 1, **bad}}))
    with pytest.raises(ValueError, match=message):
        resolve_config(path, real_loop=False, overrides={})


def test_envs_are_split_over_the_scenarios_as_evenly_as_possible():
    assert envs_per_scenario(128, 8) == [16] * 8
    assert envs_per_scenario(10, 3) == [4, 3, 3]
    assert envs_per_scenario(2, 3) == [1, 1, 1]  # at least one each


def test_training_scenarios_must_share_one_action_space():
    code = load_scenario("code")
    space = ActionSpace.shared_by([code, load_scenario("code_t1")], stop=True)
    assert space.k_max == code.k_max and space.stop_grid == tuple(code.stop_grid)
    assert ActionSpace.shared_by([code], stop=False).stop_grid is None
    with pytest.raises(ActionSpaceError, match="k_max, tau_grid and drafters"):
        ActionSpace.shared_by([code, replace(code, k_max=code.k_max - 1)], stop=False)
    with pytest.raises(ActionSpaceError, match=r"'code' has .* drafters \['draft'\], but 'mixed_pool' has"):
        ActionSpace.shared_by([code, load_scenario("mixed_pool")], stop=False)  # names both, and how
    with pytest.raises(ActionSpaceError, match="stop_grid"):
        ActionSpace.shared_by([code, replace(code, stop_grid=(0.0, 0.5))], stop=True)
    ActionSpace.shared_by([code, replace(code, stop_grid=(0.0, 0.5))], stop=False)  # no stop dimension


def test_named_policies_are_read_by_name_and_bad_ones_refused():
    parser = argparse.ArgumentParser(prog="check")
    assert named_policies(parser, "--also", ["v4=results/v4", "here=default"]) == {
        "v4": "results/v4",
        "here": "default",
    }
    for bad in (["v4"], ["=folder"], ["carried=folder"]):
        with pytest.raises(SystemExit):
            named_policies(parser, "--also", bad, reserved=("carried",))
