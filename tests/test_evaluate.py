"""The evaluation harness: a smoke run of what specrl evaluate runs (tiny pair), and its parts."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from specrl.envs import Scenario
from specrl.envs.rollout import EpisodeSummary
from specrl.envs.scenario import PromptSpec
from specrl.evaluation import Settings, roster
from specrl.evaluation.harness import add_ratios
from specrl.evaluation.report import PER_SCENARIO_HEADING
from specrl.evaluation.run_all import evaluate_all, write_results
from specrl.evaluation.runs import aggregate
from specrl.evaluation.scenario_choice import Overrides, choose_scenarios
from specrl.export import export_policy
from specrl.features import N_FEATURES
from specrl.plots import segments, shift_controllers, shift_series
from specrl.trace_evaluation import EpisodeRecord, StepRecord

SCENARIOS = ("code", "code_to_math_t1")
OURS = {
    "plain",
    "static:2:0",
    "static:4:0",
    "best-static",
    "tcp",
    "tcp-tau0.25",
    "hf-heuristic",
    "hf-confidence",
}
HF = {"hf-generate", "hf-generate-assisted"}
LEARNED = "learned:toy"


class SpacesOnly(gym.Env):
    """specrl's observation and action spaces, for building an (untrained) PPO policy."""

    observation_space = spaces.Box(0.0, 1.0, (N_FEATURES,), np.float32)
    action_space = spaces.MultiDiscrete([9, 10])


def random_policy(folder: Path) -> Path:
    """An exported PPO policy with a random action head (its actions vary with the observation)."""
    model = PPO("MlpPolicy", DummyVecEnv([SpacesOnly]), seed=0, device="cpu")
    with torch.no_grad():
        head = model.policy.action_net.weight
        head.copy_(torch.randn(head.shape, generator=torch.Generator().manual_seed(0)))
    return export_policy(
        model,
        folder,
        k_max=8,
        tau_grid=[i / 10 for i in range(10)],
        scenarios=["code"],
        pair="specrl-zoo-tiny",
        onnx=False,
    )


@pytest.fixture(scope="module")
def smoke(tiny_home, tmp_path_factory):
    """One tiny evaluation run: two scenarios (greedy; temperature 1 with a code -> math shift),
    one episode, one repeat, modeled time under the constant latency model, a learned policy and
    a missing one."""
    out = tmp_path_factory.mktemp("evaluate") / "run"
    policy = random_policy(out.parent / "toy")
    overrides = Overrides(max_new_tokens=72, latency="constant", preset="tiny", device="cpu")
    scenarios = choose_scenarios(SCENARIOS, "test", overrides)
    settings = Settings(sim_prompts_per_domain=1, repeats=1, warmup=0, time="modeled", progress=False)
    config = json.loads(json.dumps(asdict(settings)))  # the page reads the workload and timing here
    header = {"date": "2026-01-01T00:00:00+00:00", "command": "evaluate (smoke)", "config": config}
    results = evaluate_all(scenarios, settings, [out.parent / "no-such-policy", policy], header)
    write_results(results, out)
    return out, results


@pytest.mark.slow  # the smoke evaluation run: about 40 s
def test_smoke_run_writes_json_markdown_plots_and_tensorboard_with_a_row_per_controller(smoke):
    out, results = smoke
    assert json.loads((out / "results.json").read_text()) == results
    for key in (
        "command",
        "machine",
        "config",
        "pair",
        "hf_confidence_threshold",
        "simulator",
        "scenarios",
        "summary",
        "skipped_policies",
        "notes",
    ):
        assert key in results
    simulated = results["simulator"]["available"]
    # the per-token stop rules are tuned on validation traces in the simulator, so run with it
    tuned = {"adaedl", "specdec++"} if simulated else set()
    expected = OURS | HF | {LEARNED} | tuned | ({"oracle"} if simulated else set())
    markdown = (out / "results.md").read_text()
    for name in SCENARIOS:
        result = results["scenarios"][name]
        assert set(result["rows"]) == expected
        for row_name, row in result["rows"].items():
            assert (row["real"] is None) == (row_name == "oracle")
            assert (row["sim"] is None) == (row["kind"] == "hf" or not simulated)
            assert f"| {row['label']} |" in markdown
        plain = result["rows"]["plain"]["real"]
        assert plain["speedup"] == pytest.approx(1.0) and plain["mean_k"] == 0
        assert plain["mean_acceptance_length"] == 1 and plain["num_drafts"] == 0
        assert plain["tokens_per_step"] == 1
        static = result["rows"]["static:4:0"]["real"]
        assert 0 < static["num_drafts"] <= static["steps"]
        drafted = 1 + static["num_accepted_tokens"] / static["num_drafts"]
        assert static["mean_acceptance_length"] == pytest.approx(drafted)
        assert result["rows"]["static:4:0"]["real"]["mean_k"] == 4
        tcp = result["rows"]["tcp"]["real"]
        assert tcp["ratio_to_tcp"] == pytest.approx(1.0)
        assert set(tcp["latency_ms_per_token"]) >= {"std", "cv", "p50", "p90"}
        assert result["rows"]["hf-generate-assisted"]["real"]["ratio_to_tcp"] is None  # wall clock vs modeled
        assert result["hf_assistant"]["confidence_threshold"] == results["hf_confidence_threshold"]
        assert name in results["summary"]["speedup_real"]["tcp"]
        assert set(result["tuned_rules"]) == tuned
        if simulated:
            assert {"gamma", "k"} == set(result["tuned_rules"]["adaedl"])
            assert {"threshold", "k", "cumulative"} == set(result["tuned_rules"]["specdec++"])
    assert results["scenarios"]["code"]["rows"][LEARNED]["kind"] == "learned"
    assert results["config"]["split"] == "test" and "Prompt split: test" in markdown  # reported on test
    assert all(results["scenarios"][name]["split"] == "test" for name in SCENARIOS)
    shift = results["scenarios"]["code_to_math_t1"]
    assert shift["trajectories"]["tcp"]["k"] and shift["trajectories"][LEARNED]["k"]
    assert shift_controllers(shift) == ["tcp", LEARNED]
    assert "no-such-policy" in next(iter(results["skipped_policies"]))
    assert "no-such-policy" in markdown and "## Summary" in markdown and PER_SCENARIO_HEADING in markdown
    assert markdown.startswith("# ") and "Speed-up over plain" in markdown.split(PER_SCENARIO_HEADING)[0]
    for png in ("tokens_per_s.png", "acceptance.png", "shift_code_to_math_t1.png"):
        assert (out / png).read_bytes().startswith(b"\x89PNG")

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(out / "tensorboard"))
    events.Reload()
    tags = events.Tags()["scalars"]
    assert "eval/code/tcp/tokens_per_s_real" in tags
    assert "eval/code/tcp-tau0.25/speedup_over_plain_real" in tags
    assert "eval/code_to_math_t1/tcp/shift_k" in tags
    assert events.Scalars("eval/code/plain/speedup_over_plain_real")[0].value == pytest.approx(1.0)


@pytest.mark.slow  # the smoke evaluation run: about 40 s
def test_the_oracle_bounds_every_controller_and_the_greedy_replay_matches_the_real_loop(smoke):
    _, results = smoke
    if not results["simulator"]["available"]:
        pytest.skip(f"simulator not available: {results['simulator']['reason']}")
    for name in SCENARIOS:
        rows = results["scenarios"][name]["rows"]
        oracle = rows["oracle"]["sim"]["tokens_per_s"]
        for row_name, row in rows.items():
            if row["sim"] is not None:
                assert oracle >= row["sim"]["tokens_per_s"] * (1 - 1e-9), row_name
    # Greedy, modeled time, the same latency model and the same episode: the replay is the real loop.
    for row_name, row in results["scenarios"]["code"]["rows"].items():
        if row["sim"] is not None and row["real"] is not None:
            assert row["sim"]["tokens_per_s"] == pytest.approx(row["real"]["tokens_per_s"]), row_name


# ---- the parts ---------------------------------------------------------------------------------


def test_roster_names_and_errors():
    assert roster.make_controller("plain", 8).act(None).k == 0
    assert roster.make_controller("static:3:0.2", 8).act(None).tau == pytest.approx(0.2)
    assert roster.static_name(4, 0.0) == "static:4:0" and roster.static_name(0, 0.0) == "plain"
    for bad in ("static:9", "static:x", "static:1:2:3", "nonsense"):
        with pytest.raises(roster.ControllerNameError):
            roster.make_controller(bad, 8)


def test_episode_plan_is_the_trace_collection_order_and_the_real_loop_takes_the_first_round_robin():
    scenario = Scenario(prompts=PromptSpec({"code": 1.0, "prose": 0.0, "math": 2.0}))
    sets = {"code": ["a", "b", "c"], "prose": ["d"], "math": ["e"]}
    plan = roster.episode_plan(scenario, sets, per_domain=2, seed=10)
    expected = [("code", 0, 10), ("code", 1, 11), ("math", 0, 12)]
    assert [(e.domain, e.prompt_index, e.seed) for e in plan] == expected
    assert plan[0].options == {"domain": "code", "prompt_index": 0}
    assert roster.first_episodes(plan, 2) == [plan[0], plan[2]]


def test_aggregate_charges_each_token_its_steps_seconds_per_token():
    steps = [StepRecord(4, 0.020, 3, 3, 3, 0.0, "code", 0), StepRecord(1, 0.010, 3, 0, 3, 0.0, "code", 4)]
    summary = EpisodeSummary(
        new_tokens=5, verify_seconds=0.030, steps=2, num_draft_tokens=6, num_accepted_tokens=3, num_drafts=2
    )
    summary.k_sum = 6
    row = aggregate([[EpisodeRecord(summary, steps)]])
    assert row["tokens_per_s"] == pytest.approx(5 / 0.030)
    assert row["mean_acceptance_length"] == 2.5 and row["acceptance_rate"] == 0.5 and row["mean_k"] == 3
    assert (row["num_drafts"], row["num_draft_tokens"], row["num_accepted_tokens"]) == (2, 6, 3)
    assert row["tokens_per_step"] == 2.5
    latency = row["latency_ms_per_token"]  # per token: 5, 5, 5, 5, 10 ms
    assert latency["mean"] == pytest.approx(6.0) and latency["std"] == pytest.approx(2.0)
    assert row["step_acceptance_histogram"]["counts"] == [1, 0, 0, 0, 0, 0, 0, 0, 0, 1]
    assert aggregate([[EpisodeRecord(summary)]], "hf")["acceptance_rate"] is None


def test_ratios_use_the_matching_reference():
    def cell(tps: float) -> dict:
        return {"tokens_per_s": tps}

    rows = {
        "plain": {"kind": "plain", "real": cell(100), "sim": cell(50)},
        "tcp": {"kind": "rule", "real": cell(200), "sim": None},
        "hf-generate": {"kind": "hf", "real": cell(80), "sim": None},
        "hf-generate-assisted": {"kind": "hf", "real": cell(120), "sim": None},
    }
    add_ratios(rows, "wallclock")
    assert rows["tcp"]["real"]["speedup"] == 2 and rows["plain"]["real"]["ratio_to_tcp"] == 0.5
    assert rows["hf-generate-assisted"]["real"]["speedup"] == pytest.approx(1.5)  # over HF's plain generate
    assert rows["hf-generate-assisted"]["real"]["ratio_to_tcp"] == pytest.approx(0.6)
    assert rows["plain"]["sim"]["ratio_to_tcp"] is None  # no TCP in the simulator column
    add_ratios(rows, "modeled")
    assert rows["hf-generate-assisted"]["real"]["ratio_to_tcp"] is None


def test_shift_plot_data_spans_both_segments_to_the_end_of_the_last_step():
    # code until 64 tokens, then math: steps on both sides, the last step emits 3 tokens from 120
    trajectory = {
        "position": [0, 30, 62, 64, 100, 120],
        "k": [4, 4, 4, 2, 1, 1],
        "tau": [0.0, 0.0, 0.0, 0.3, 0.3, 0.3],
        "domain": ["code", "code", "code", "math", "math", "math"],
        "proposed": [4, 4, 4, 2, 1, 1],
        "accepted": [4, 2, 1, 1, 0, 2],
    }
    series = shift_series(trajectory)
    assert series["x"][0] == 0 and series["x"][-1] == 123  # closes the last step, past the shift
    assert {"code", "math"} <= set(series["domain"])
    assert [x for x, d in zip(series["x"], series["domain"], strict=True) if d == "math"][0] == 64
    assert series["k"][-1] == 1 and len(series["k"]) == len(series["x"])
    result = {
        "trajectories": {"tcp": trajectory},
        "shift": [{"after_tokens": 64, "domain": "math"}],
        "max_new_tokens": 128,
    }
    assert segments(result) == [(0, 64, "code"), (64, 128, "math")]


def test_compare_plays_every_player_on_each_episode_with_one_seed_in_a_fresh_order():
    from specrl.evaluation.compare import by_player, compare, paired_ratios, shuffled

    played = []

    def player(name):
        def play(episode, seed):
            played.append((name, episode, seed))
            return f"{name}:{episode}:{seed}"

        return play

    players = {name: player(name) for name in ("a", "b", "c")}
    trials = compare(
        players,
        ["e0", "e1"],
        repeats=3,
        order=shuffled(0),
        seed=lambda episode, repeat, index: 100 * repeat + index,
        warmup=1,
        warmup_players=["a"],
    )
    assert played[0] == ("a", "e0", 0)  # the warm-up, untimed
    assert len(trials) == 3 * 2 * 3 and len(played) == 1 + len(trials)
    for repeat in range(3):
        for index in range(2):
            group = [t for t in trials if t.repeat == repeat and t.episode == index]
            assert sorted(t.player for t in group) == ["a", "b", "c"]  # everyone, once
            assert {t.seed for t in group} == {100 * repeat + index}  # on the same draws
    orders = [tuple(t.player for t in trials[i : i + 3]) for i in range(0, len(trials), 3)]
    assert len(set(orders)) > 1  # a fresh order per episode
    grid = by_player(trials, list(players))
    assert grid["b"][2] == ["b:e0:200", "b:e1:201"]
    ratios = paired_ratios({"ppo": [2.0, 4.0, 3.0], "tcp": [1.0, 4.0, 2.0]}, "ppo")
    assert ratios == {"ppo": 1.0, "tcp": 1.5}


def test_the_real_loop_section_sets_the_policy_against_the_policies_run_alongside():
    from specrl.evaluation.intervals import paired_ratio_interval
    from specrl.evaluation.real_loop_check import RealLoopRow, real_loop_section
    from specrl.training.comparison import BEST_STATIC, PLAIN, PPO, TCP, StaticSetting

    tokens = {PLAIN: 70.0, TCP: 90.0, BEST_STATIC: 100.0, PPO: 104.0, "here": 102.0}
    per_repeat = {PLAIN: [70.0, 70.0], TCP: [90.0, 90.0], BEST_STATIC: [100.0, 100.0], "here": [104.0, 100.0]}
    row = RealLoopRow(
        tokens,
        {PLAIN: 1.49, TCP: 1.16, BEST_STATIC: 1.04, PPO: 1.0, "here": 1.02},
        StaticSetting(5, 0.0),
        {role: paired_ratio_interval([104.0, 104.0], v) for role, v in per_repeat.items()},
        per_repeat | {PPO: [104.0, 104.0]},
    )
    text = real_loop_section({"code": row}, prompts=2, repeats=2, versus=["here"])
    # PPO / here: ratios 1.0 and 1.04: mean 1.02, SE 0.02, t(1 df) = 12.706; here / the best rule
    # (the best static setting): ratios 1.04 and 1.0, the same interval
    interval = "1.020 [0.766, 1.274] n=2"
    assert f"| code | here | 104.0 | 102.0 | {interval} | {interval} (static) |" in text
    assert row.to_best_rule("here").verdict == "tie"
    assert "policies run alongside" not in real_loop_section({"code": row}, prompts=2, repeats=2)
