"""One request's share of a batch (``batch.share``): the per-request policy's training view.

A share step costs the batch's step, every row stepping alike, over its rows (packed as vLLM packs
them); the features see the batch's rows; a plain step earns about 0; the oracle prices the same
share, so the best static setting it finds is the one the env measures. Scenarios say which engine
recorded their traces, and a run prices with the latency file its scenarios name.
"""

from __future__ import annotations

import numpy as np
import pytest

from specrl.controllers import StaticController
from specrl.envs import TraceReplayEnv, cached_traces, load_scenario
from specrl.envs.scenario import Scenario, ScenarioError, SetupError
from specrl.envs.scenario.sources import machine_latency
from specrl.envs.trace_store import cache_key
from specrl.features import FEATURE_NAMES
from specrl.latency import LatencyModel
from specrl.oracle import best_static, clairvoyant_bound
from specrl.trace_evaluation import evaluate_controller


def share_scenario(size: int, **extra) -> Scenario:
    """Mixed greedy requests over the lookup and the draft, a request's share of ``size`` rows,
    priced by the shipped vLLM prices (traces: specrl's engine's, shipped with the small pair)."""
    base = load_scenario("vllm_share_16")
    data = {
        "pair": {"preset": "small"},
        "prompts": {"domains": dict(base.prompts.domains)},
        "sampling": {"temperature": 0.0},
        "drafters": list(base.drafters),
        "batch": {"size": size, "share": True},
        "latency": base.latency,
        **extra,
    }
    return Scenario.from_dict(data)


@pytest.fixture(scope="module")
def prices() -> LatencyModel:
    return load_scenario("vllm_share_16").latency_model(share_scenario(1).pair.info(), calibrate=False)


@pytest.fixture(scope="module")
def validation():
    scenario = share_scenario(1)
    return cached_traces(scenario, "validation", scenario.pair.info(), record=False)


def test_a_share_step_costs_the_batch_step_over_its_rows_and_sees_its_rows(prices, validation):
    size = 16
    env = TraceReplayEnv(share_scenario(size), traces=validation, latency=prices)
    observation, info = env.reset(seed=0, options={"trace_index": 3})
    batch_feature = FEATURE_NAMES.index("batch_size")
    assert observation[batch_feature] == pytest.approx(np.log2(size) / 8)
    assert env.reference_tokens_per_s == pytest.approx(prices.plain_throughput(size))
    for step, k in enumerate([0, 3, 5, 2, 0, 8]):
        row = env.active[0]
        context = row.context_length
        observation, reward, done, _, info = env.step(np.array([k, 0, 0]))  # the lookup (drafter 0)
        (result,) = info["step_results"]
        draft, verify = prices.step_seconds(
            context,
            result.draft_forwards,
            result.proposed,
            "ngram",
            rows=size,
            verified=size * (1 + result.proposed),
        )
        assert info["seconds"] == pytest.approx((draft + verify) / size)
        assert result.verify_seconds == pytest.approx(verify / size)
        assert info["batch_size"] == size and observation[batch_feature] == pytest.approx(0.5)
        expected = info["tokens"] - env.reference_tokens_per_s * info["seconds"]
        assert reward == pytest.approx(expected / env.scenario.reward.scale)
        if step == 0:  # plain decoding earns about 0 (rho is taken at another context)
            assert abs(reward) < 0.5
        if done:
            break


def test_the_share_is_what_a_request_pays_a_bigger_batch_dilutes_a_draft(prices, validation):
    """The oracle and the env price a share alike, and the more rows share a step, the less a
    drafted token pays: the best static k over the lookup falls from 1 row to 64."""
    best = {}
    for size in (1, 64):
        scenario = share_scenario(size)
        bound = best_static(
            validation, prices, scenario.tau_grid, count=1, drafters=scenario.drafters, rows=size
        )
        measured = evaluate_controller(
            StaticController(bound.k, drafter=bound.drafter), scenario, validation, prices, 1
        ).tokens_per_s
        assert measured == pytest.approx(bound.tokens_per_s, rel=1e-6)
        plain = evaluate_controller(StaticController(0), scenario, validation, prices, 1).tokens_per_s
        assert plain == pytest.approx(bound.table[(0, scenario.tau_grid[0], scenario.drafters[0])], rel=1e-6)
        oracle = clairvoyant_bound(validation, prices, count=1, drafters=scenario.drafters, rows=size)
        assert oracle.tokens_per_s >= bound.tokens_per_s
        best[size] = (bound.k, bound.tokens_per_s / plain)
    assert best[64][0] < best[1][0] and best[64][1] < best[1][1]


def test_a_share_of_a_batch_is_one_request_and_needs_prices_over_rows(validation):
    with pytest.raises(ScenarioError, match="batch.share replays one request"):
        share_scenario(16, batch={"size": 16, "share": True, "requests": 4})
    with pytest.raises(ScenarioError, match="batch.share replays one request"):
        share_scenario(16, batch={"load": [[1, 1]], "share": True})
    one_row = LatencyModel.from_cost_model(pair="specrl-zoo-small")
    with pytest.raises(ValueError, match="prices one row only"):
        TraceReplayEnv(share_scenario(4, drafters=["draft"]), traces=validation, latency=one_row)


def test_traces_recorded_by_vllm_are_keyed_apart_and_never_recorded_by_specrl(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    ours, vllms = share_scenario(4), share_scenario(4, recorded_by="vllm")
    assert cache_key(ours, "test", 8, 0) != cache_key(vllms, "test", 8, 0)
    assert cache_key(ours, "test", 8, 0) == cache_key(share_scenario(64), "test", 8, 0)  # shared by sizes
    assert "vllm" in cached_traces(vllms, "test", vllms.pair.info()).meta  # shipped: recorded inside vLLM
    unshipped = share_scenario(4, recorded_by="vllm", max_new_tokens=32)
    with pytest.raises(SetupError, match=r"specrl collect --scenarios \S+ --split test --engine vllm"):
        cached_traces(unshipped, "test", unshipped.pair.info())  # specrl's engine would record them


def test_collect_records_a_vllm_scenario_through_vllm_only(capsys):
    from specrl.cli import main

    with pytest.raises(SystemExit):
        main(["collect", "--engine", "specrl", "--scenarios", "vllm_share_16", "--split", "test"])
    assert "record their traces through vLLM: use --engine vllm" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["collect", "--scenarios", "vllm_share_16", "code", "--split", "test"])
    assert "collect each engine's apart" in capsys.readouterr().err


def test_a_run_prices_with_the_latency_file_its_scenarios_name(prices):
    pair = share_scenario(1).pair.info()
    scenarios = [share_scenario(1), share_scenario(16)]
    assert machine_latency(scenarios, pair, 8, ("ngram", "draft")).to_dict() == prices.to_dict()
    with pytest.raises(ScenarioError, match="different latency models"):
        machine_latency([*scenarios, share_scenario(4, latency="calibrated")], pair, 8, ("ngram",))


def test_a_policy_trained_on_serving_prices_records_them_whole(prices):
    from specrl.training.inputs import training_machines

    described = training_machines(["machine"], prices).describe()
    assert described["machine"] == "vllm-cpu-xeon-2t" and described["prices"] == prices.to_dict()
    calibrated = LatencyModel.from_cost_model(pair="specrl-zoo-small")
    assert "prices" not in training_machines(["machine"], calibrated).describe()
