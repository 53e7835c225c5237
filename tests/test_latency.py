"""The latency model: interpolation, tables, the step formula, the loop fit, the file format, the
cache, the wiring into the envs (greedy vs sampled)."""

from __future__ import annotations

import json
import re
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import prompts, scenario

import specrl
import specrl.latency.model as latency_model
from specrl.cli import main
from specrl.engine.sampling import SamplingConfig
from specrl.envs import (
    CostModel,
    PromptSpec,
    RewardSpec,
    Scenario,
    ScenarioError,
    SpecDecodeEnv,
    TraceReplayEnv,
    VecTraceReplay,
    collect_traces,
    load_scenario,
)
from specrl.latency import (
    LATENCY_FORMAT_VERSION,
    CalibrationWarning,
    LatencyError,
    LatencyModel,
    StepRecords,
    calibrated,
    calibration,  # calibrated() calls its learn and profile
    default_contexts,
    device_key,
    fit_records,
    heldout_contexts,
    latency_path,
    learn,
    profile,
    record_loop,
)
from specrl.latency.isotonic import isotonic, tolerant_isotonic

REPO = Path(__file__).resolve().parent.parent
GRID = [8, 40, 100]
# A file as format version 1 wrote it (isolated profile, one draft cost, no sampled tables).
OLD_FILE = {
    "format": "specrl-latency",
    "version": 1,
    "kind": "measured",
    "pair": "p",
    "device": "d",
    "dtype": "float32",
    "batch_size": 1,
    "contexts": [16, 32],
    "new_tokens": [1, 2],
    "target_seconds": [[0.010, 0.011], [0.012, 0.013]],
    "draft_seconds": [0.001, 0.0011],
    "fit_error": None,
    "measurement": {},
}


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


def true_costs(context: np.ndarray, n: np.ndarray, forwards: np.ndarray, sampled: np.ndarray):
    """Known costs of the synthetic loop: the first draft forward costs twice the next ones;
    sampling adds 15% to a verify and 0.3 ms to every draft forward; all linear in the context."""
    first = 2e-3 + 2e-6 * context + 0.3e-3 * sampled
    following = 1e-3 + 1e-6 * context + 0.3e-3 * sampled
    draft = np.where(forwards > 0, first + (forwards - 1) * following, 0.0)
    verify = (10e-3 + 1e-3 * (n - 1) + 4e-6 * context) * np.where(sampled, 1.15, 1.0)
    return draft, verify


def synthetic_records(
    k_max: int = 8, steps: int = 6000, seed: int = 0, noise: float = 0.03, preempted: float = 0.003
) -> StepRecords:
    """Steps as record_loop gives them, timed by :func:`true_costs` with multiplicative noise and
    a fraction ``preempted`` of verifies preempted (+0.2 s)."""
    rng = np.random.default_rng(seed)
    sampled = rng.random(steps) < 0.5
    context = rng.integers(20, 400, steps)
    k = rng.integers(0, k_max + 1, steps)
    stopped = (k > 0) & (rng.random(steps) < 0.3)  # a tau cut: one forward more than proposals
    forwards = np.where(stopped, rng.integers(1, np.maximum(k, 1) + 1), k)
    proposed = np.where(stopped, forwards - 1, k)
    draft, verify = true_costs(context, proposed + 1, forwards, sampled)
    draft = draft * (1 + noise * rng.standard_normal(steps))
    verify = verify * (1 + noise * rng.standard_normal(steps)) + 0.2 * (rng.random(steps) < preempted)
    columns = {"sampled": sampled, "context": context, "draft_forwards": forwards, "proposed": proposed}
    columns |= {"k": k, "draft_seconds": draft, "verify_seconds": verify, "episode": np.arange(steps) // 20}
    return StepRecords.from_dict(columns)


@pytest.fixture(scope="module")
def loop_model(pair) -> LatencyModel:
    """A loop model fitted to synthetic records (k_max 8, no preemptions), for the random pair."""
    return learn(pair, k_max=8, records=synthetic_records(preempted=0.0), progress=False)


def quick_learn(calls: list):
    """A stand-in for ``learn`` that records its calls and fits synthetic steps (no timing)."""

    def run(pair, *, k_max=8, progress=True, **kwargs):
        calls.append(k_max)
        return learn(pair, k_max=k_max, records=synthetic_records(k_max, steps=1500), progress=False)

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


def interpolated_step_seconds(
    model: LatencyModel, context: int, draft_forwards: int, proposed: int
) -> tuple[float, float]:
    """A step's (draft, verify) seconds computed apart from the model's code: numpy's np.interp
    (piecewise linear, constant outside the grid) on each row of its tables, and the target
    linear in n beyond the last row."""
    grid = np.array(model.contexts, dtype=np.float64)
    first = np.interp(context, grid, model.draft_table)
    following = np.interp(context, grid, model.draft_next_table)
    rows = [np.interp(context, grid, row) for row in model.target_table]
    n = proposed + 1
    verify = rows[n - 1] if n <= len(rows) else rows[-1] + (n - len(rows)) * (rows[-1] - rows[-2])
    return (first + (draft_forwards - 1) * following if draft_forwards else 0.0), verify


def test_scalar_methods_equal_the_interpolated_tables(measured, pair):
    window, widest = pair.context_length, measured.n_max + 2  # past the measured n too
    for context in range(0, window + 1, 7):
        expected = [interpolated_step_seconds(measured, context, 1, n - 1) for n in range(1, widest + 1)]
        actual = [measured.target_seconds(n, context) for n in range(1, widest + 1)]
        assert actual == pytest.approx([v for _, v in expected], rel=1e-12)
        assert measured.draft_seconds(context) == pytest.approx(expected[0][0], rel=1e-12)
        assert measured.target_seconds(0, context) == 0.0


def test_price_line_is_remembered_per_rows_and_context_and_the_memory_is_bounded(known, monkeypatch):
    """The features ask a price line on every step of every served request: a model remembers
    each (rows, rounded context) it priced, and starts over past PRICE_LINE_CACHE of them."""
    monkeypatch.setattr(latency_model, "PRICE_LINE_CACHE", 3)
    first = known.price_line(1, 14.6)
    assert known.price_line(1, 15.4) is first  # the same rounded context
    fresh = LatencyModel("p", "d", [10, 20], [[1.0, 2.0], [3.0, 5.0]], [0.1, 0.3])
    assert first == fresh.price_line(1, 15) and first.curve == pytest.approx((1.5, 4.0))
    for context in (11, 12, 13, 17, 19):
        line = known.price_line(1, context)
        assert len(known._price_lines) <= 3
        assert line == fresh.price_line(1, context)
    assert known.for_sampling(SamplingConfig(temperature=1.0)).price_line(1, 15) == first  # same tables


def test_profile_measures_the_grid_and_reports_heldout_error(measured, pair):
    assert measured.kind == "profiled" and measured.pair == pair.name
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
    fitted = isotonic(np.array([1.0, 4.0, 2.0, 3.0, 5.0]))
    assert fitted.tolist() == pytest.approx([1.0, 3.0, 3.0, 3.0, 5.0])
    assert isotonic(np.array([2.0, 1.0])).tolist() == [1.5, 1.5]


def brute_force_isotonic(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The isotonic regression by its min-max formula (no pooling): x_i is the largest, over
    the runs starting at or before i, of the smallest weighted mean of a run from there to or
    past i."""

    def mean(j: int, k: int) -> float:
        return float(np.dot(values[j : k + 1], weights[j : k + 1]) / weights[j : k + 1].sum())

    n = len(values)
    return np.array([max(min(mean(j, k) for k in range(i, n)) for j in range(i + 1)) for i in range(n)])


def test_isotonic_fits_pool_group_means_weighted_by_group_size():
    # By hand: means 6 (3 samples), 2 (2 samples), 7 (2 samples). Pooling the first two gives
    # (3 * 6 + 2 * 2) / 5 = 4.4, not the unweighted 4; 7 is above it and stays.
    groups = [np.array([5.0, 7.0, 6.0]), np.array([1.0, 3.0]), np.array([7.0, 7.0])]
    assert tolerant_isotonic(groups, np.inf).tolist() == pytest.approx([4.4, 4.4, 7.0])
    assert isotonic(np.array([6.0, 2.0, 7.0]), weights=np.array([3.0, 2.0, 2.0])).tolist() == pytest.approx(
        [4.4, 4.4, 7.0]
    )
    # The dip 6 -> 2 against its standard error sqrt(1 / 3 + 2 / 2) = 1.155: 3.46 standard
    # errors, so kept at z = 3 and pooled (like the strict fit) at z = 4.
    assert tolerant_isotonic(groups, 3.0).tolist() == pytest.approx([6.0, 2.0, 7.0])
    assert tolerant_isotonic(groups, 4.0).tolist() == pytest.approx([4.4, 4.4, 7.0])


def test_isotonic_fits_equal_the_min_max_formula_on_random_sequences():
    rng = np.random.default_rng(7)
    for _ in range(50):
        size = int(rng.integers(1, 9))
        values, weights = rng.normal(size=size), rng.integers(1, 5, size).astype(np.float64)
        expected = brute_force_isotonic(values, weights)
        assert isotonic(values, weights).tolist() == pytest.approx(expected.tolist(), abs=1e-12)
        assert isotonic(values).tolist() == pytest.approx(
            brute_force_isotonic(values, np.ones(size)).tolist(), abs=1e-12
        )
        # Groups of samples with these means and sizes: a huge z pools every violation too.
        spread = [np.linspace(-1.0, 1.0, int(w) + 1) for w in weights]
        groups = [v + s - s.mean() for v, s in zip(values, spread, strict=True)]
        counts = np.array([len(g) for g in groups], dtype=np.float64)
        strict = brute_force_isotonic(values, counts).tolist()
        assert tolerant_isotonic(groups, np.inf).tolist() == pytest.approx(strict, abs=1e-12)
        assert tolerant_isotonic(groups, 1e12).tolist() == pytest.approx(strict, abs=1e-12)


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


# ---- the loop model: fit, views, the vectorised path ---------------------------------------------


def test_fit_recovers_first_and_next_draft_forwards_and_the_sampling_cost():
    grid, costs = fit_records(synthetic_records(), k_max=8, context_window=1000)
    knots = np.array(grid[:-1])
    assert grid[-1] == 1000 and len(knots) == 5 and 20 <= knots[0] < knots[-1] < 400
    n = np.arange(1, 10)[:, None]
    for mode, sampled in (("greedy", False), ("sampled", True)):
        tables = costs[mode]
        flags = np.full(len(knots), sampled)
        first, _ = true_costs(knots, np.ones_like(knots), np.ones_like(knots), flags)
        two, verify = true_costs(knots[None, :], n, np.full((9, len(knots)), 2), flags[None, :])
        assert tables["draft_first_seconds"][:-1] == pytest.approx(first, rel=0.03)
        assert tables["draft_next_seconds"][:-1] == pytest.approx(two[0] - first, rel=0.03)
        assert np.asarray(tables["target_seconds"])[:, :-1] == pytest.approx(verify, rel=0.02)
        # Beyond the data the cost continues linearly (the truth is linear in the context).
        _, at_window = true_costs(np.array([1000]), n, np.ones((9, 1)), np.array([sampled]))
        assert np.asarray(tables["target_seconds"])[:, -1:] == pytest.approx(at_window, rel=0.05)
    # The first forward after a verify is dearer than the next ones; sampling costs extra.
    greedy, sampled = costs["greedy"], costs["sampled"]
    assert (greedy["draft_first_seconds"] > 1.6 * greedy["draft_next_seconds"]).all()
    ratio = np.asarray(sampled["target_seconds"]) / np.asarray(greedy["target_seconds"])
    assert ratio[:, :-1].mean() == pytest.approx(1.15, rel=0.01) and (abs(ratio - 1.15) < 0.05).all()


def test_loop_fit_is_monotone_and_reports_its_heldout_error(loop_model):
    for mode in ("greedy", "sampled"):
        costs = loop_model.costs[mode]
        assert (np.diff(costs.target, axis=0) >= 0).all() and (np.diff(costs.target, axis=1) >= 0).all()
        assert (np.diff(costs.draft_first) >= 0).all() and (np.diff(costs.draft_next) >= 0).all()
    error = loop_model.fit_error
    assert error["method"] == "loop" and error["steps"] == 6000 // 5
    for mode in ("greedy", "sampled"):
        assert set(error[mode]["step_by_k"]) == {str(k) for k in range(9)}
        assert abs(error[mode]["step"]) < 0.02 and abs(error[mode]["draft"]) < 0.03
    assert error["max"] < 0.05
    assert loop_model.kind == "loop" and loop_model.measurement["steps"] == 6000
    assert "Held-out fit error" in loop_model.to_markdown() and "**sampled**" in loop_model.to_markdown()


def test_monotone_in_n_pools_noise_but_keeps_a_real_dip():
    jitter = np.tile([-1.0, 1.0], 20)  # mean 0, standard deviation 1: a standard error of 0.16
    noisy = [10 + jitter, 9.8 + jitter, 12 + jitter]  # n = 2 looks 0.2 cheaper: noise
    pooled = tolerant_isotonic(noisy, 3.0)
    assert pooled.tolist() == pytest.approx([9.9, 9.9, 12.0])
    real = [10 + 0.1 * jitter, 8 + 0.1 * jitter]  # 2 lower, at a standard error of 0.02: real
    assert tolerant_isotonic(real, 3.0).tolist() == pytest.approx([10.0, 8.0])
    assert len(set(tolerant_isotonic(real, np.inf).tolist())) == 1  # strict: pooled


def test_a_verify_never_costs_less_than_the_fastest_recorded_one():
    # A loaded machine: the context slope the other verify sizes share is steep, so the line of
    # one-token verifies (timed at long contexts only, and fast) would cross zero at short ones.
    records = synthetic_records(steps=1200).to_dict()
    context, n = np.asarray(records["context"]), np.asarray(records["proposed"]) + 1
    context[n == 1] = 390  # plain steps timed only at long contexts, and fast there
    records["context"], records["verify_seconds"] = context, np.where(n == 1, 0.0005, 1e-4 * context)
    grid, costs = fit_records(StepRecords.from_dict(records), k_max=8)
    for mode in ("greedy", "sampled"):
        target = np.asarray(costs[mode]["target_seconds"])
        assert (target >= 0.0005).all() and (np.diff(target, axis=1) >= 0).all()


def test_fit_refuses_records_without_a_mode_or_a_verify_size():
    records = synthetic_records(steps=600)
    with pytest.raises(LatencyError, match="no sampled steps recorded"):
        fit_records(records.select(~records.sampled), k_max=8)
    with pytest.raises(LatencyError, match=r"verify n = 9 tokens: record more steps"):
        fit_records(records.select(records.proposed < 8), k_max=8)


def test_for_sampling_gives_cached_views_that_share_the_tables(loop_model):
    greedy = loop_model.for_sampling(SamplingConfig())
    sampled = loop_model.for_sampling(SamplingConfig(temperature=0.7, top_k=5))
    assert greedy is loop_model and loop_model.for_sampling(None) is loop_model
    assert sampled.mode == "sampled" and sampled is loop_model.for_sampling(SamplingConfig(temperature=1.0))
    assert sampled.for_sampling(SamplingConfig()) is loop_model
    assert np.shares_memory(sampled.target_table, loop_model.costs["sampled"].target)  # the batch of one
    assert sampled.target_seconds(3, 200) > loop_model.target_seconds(3, 200)
    assert sampled.plain_tokens_per_s < loop_model.plain_tokens_per_s
    assert sampled.to_dict() == loop_model.to_dict()  # a file holds both modes


def test_step_seconds_prices_the_first_draft_forward_apart(loop_model):
    for view in (loop_model, loop_model.for_sampling(SamplingConfig(temperature=1.0))):
        first, following = view.draft_seconds(150), view.draft_seconds(150, 2) - view.draft_seconds(150)
        assert first > following > 0
        assert view.step_seconds(150, 5, 4) == (view.draft_seconds(150, 5), view.target_seconds(5, 150))
        assert view.draft_seconds(150, 5) == pytest.approx(first + 4 * following)
        assert view.step_seconds(150, 0, 0) == (0.0, view.target_seconds(1, 150))
        assert view.draft_seconds(150, 0) == 0.0


@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_step_seconds_equals_the_interpolated_tables(loop_model, mode):
    view = loop_model.for_sampling(SamplingConfig(temperature=float(mode == "sampled")))
    rng = np.random.default_rng(3)
    contexts = rng.integers(0, 1024, 3000)
    forwards = rng.integers(0, 12, 3000)
    proposed = np.minimum(forwards, rng.integers(0, 12, 3000))  # past n_max too
    steps = list(zip(contexts.tolist(), forwards.tolist(), proposed.tolist(), strict=True))
    expected = [interpolated_step_seconds(view, c, f, p) for c, f, p in steps]
    actual = [view.step_seconds(c, f, p) for c, f, p in steps]
    assert [d for d, _ in actual] == pytest.approx([d for d, _ in expected], rel=1e-12)
    assert [v for _, v in actual] == pytest.approx([v for _, v in expected], rel=1e-12)
    # the per-context cache of step_seconds returns what the uncached methods compute
    context, forwards, proposed = steps[0]
    assert actual[0] == (view.draft_seconds(context, forwards), view.target_seconds(proposed + 1, context))


def test_record_loop_times_both_modes_and_every_k(pair):
    records = record_loop(pair, k_max=3, steps=80, warmup_steps=6, max_new_tokens=24, progress=False)
    assert len(records) == 80 and records.sampled.sum() == 40
    for sampled in (False, True):
        mine = records.select(records.sampled == sampled)
        assert set(mine.k.tolist()) == {0, 1, 2, 3}
    assert (records.proposed <= records.k).all() and (records.proposed <= records.draft_forwards).all()
    assert (records.draft_forwards <= records.proposed + 1).all() and (
        records.draft_forwards <= records.k
    ).all()
    drafted = records.draft_forwards > 0
    assert (records.draft_seconds[drafted] > 0).all() and (records.verify_seconds > 0).all()
    assert (records.context >= 1).all() and len(np.unique(records.episode)) >= 4
    assert StepRecords.from_dict(json.loads(json.dumps(records.to_dict()))).to_dict() == records.to_dict()


def test_learn_fits_the_recorded_loop(pair):
    model = learn(pair, k_max=2, steps=240, warmup_steps=10, max_new_tokens=24, progress=False)
    assert model.kind == "loop" and model.n_max == 3 and model.contexts[-1] == pair.context_length - 1
    assert model.measurement["steps"] == 240 and model.measurement["sampled_steps"] == 120
    assert set(model.fit_error) >= {"greedy", "sampled", "max"}
    assert model.for_sampling(SamplingConfig(temperature=1.0)).mode == "sampled"


# ---- the envs pick the model of their sampling -----------------------------------------------------


def test_envs_price_sampled_scenarios_with_the_sampled_model(pair, prompt_file, loop_model):
    prompts = PromptSpec(file=prompt_file)
    sampled = scenario(prompt_file, temperature=1.0, max_new_tokens=12, prompts=prompts)
    greedy = scenario(prompt_file, max_new_tokens=12, prompts=prompts)
    sampled_view = loop_model.for_sampling(sampled.sampling)
    traces = collect_traces(pair, sampled, "train", progress=False)
    envs = [
        TraceReplayEnv(sampled, traces=traces, latency=loop_model),
        VecTraceReplay(sampled, traces, loop_model, num_envs=2, seed=0),
        SpecDecodeEnv(sampled, pair=pair, split="train", latency=loop_model),
    ]
    for env in envs:
        assert env.latency is sampled_view
        assert env.reference_tokens_per_s == sampled_view.plain_tokens_per_s != loop_model.plain_tokens_per_s
    replay = envs[0]
    replay.reset(seed=0)
    _, _, _, _, info = replay.step(np.array([4, 0]))
    result = info["step_result"]
    assert info["seconds"] == sum(sampled_view.seconds(result)) != sum(loop_model.seconds(result))
    assert SpecDecodeEnv(greedy, pair=pair, split="train", latency=sampled_view).latency is loop_model
    greedy_traces = collect_traces(pair, greedy, "train", progress=False)
    assert TraceReplayEnv(greedy, traces=greedy_traces, latency=sampled_view).latency is loop_model


# ---- the file --------------------------------------------------------------------------------------


def test_save_and_load_round_trip(measured, tmp_path):
    path = tmp_path / "sub" / "latency.json"
    measured.save(path)
    assert [p.name for p in path.parent.iterdir()] == ["latency.json"], "no temporary file left"
    loaded = LatencyModel.load(path)
    assert loaded.to_dict() == measured.to_dict()
    steps = [(256, 3, n) for n in range(10)]
    assert [loaded.step_seconds(*step) for step in steps] == [measured.step_seconds(*step) for step in steps]
    data = json.loads(path.read_text())
    assert data["version"] == LATENCY_FORMAT_VERSION and data["batch_sizes"] == [1]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(version=99), r"latency format version 99, but this specrl reads version 3"),
        (lambda d: d.pop("sampled"), r"missing key\(s\) \['sampled'\]"),
        (lambda d: d["sampled"].pop("draft_next_seconds"), r"'sampled' must hold"),
        (lambda d: d.update(kind="guessed"), r"kind must be one of"),
        (lambda d: d.update(format="other"), r"not a specrl latency file"),
        (lambda d: d.update(batch_sizes=[1, 4]), r"target_seconds must have, per batch size \(2\)"),
        (lambda d: d.update(batch_sizes=[0]), r"batch_sizes must be .* values >= 1"),
        (
            lambda d: d["greedy"].update(draft_first_seconds=[0.1]),
            r"draft_first_seconds must have one value per context \(3\)",
        ),
        (
            lambda d: d["sampled"]["target_seconds"][0].pop(),
            r"the sampled target_seconds must have the greedy one's shape",
        ),
        (lambda d: d.update(contexts=[8, 8, 100]), r"strictly increasing"),
        (
            lambda d: d["sampled"]["target_seconds"][0][0].__setitem__(0, -1.0),
            r"target_seconds must be finite and > 0",
        ),
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
    assert str(path) in str(error.value) and "specrl calibrate" in str(error.value)


def test_an_old_format_file_is_refused_with_a_clear_message(tmp_path):
    path = tmp_path / "old.json"
    path.write_text(json.dumps(OLD_FILE))
    with pytest.raises(LatencyError) as error:
        LatencyModel.load(path)
    message = str(error.value)
    assert str(path) in message and "format version 1" in message and "reads version 3" in message
    assert "specrl calibrate" in message


def test_loop_model_file_round_trips_both_modes(loop_model, tmp_path):
    path = tmp_path / "loop.json"
    loop_model.for_sampling(SamplingConfig(temperature=1.0)).save(path)
    loaded = LatencyModel.load(path)
    assert loaded.to_dict() == loop_model.to_dict() and loaded.mode == "greedy"
    for temperature in (0.0, 1.0):
        mine = loaded.for_sampling(SamplingConfig(temperature=temperature))
        theirs = loop_model.for_sampling(SamplingConfig(temperature=temperature))
        steps = [
            (context, forwards, n) for context in (0, 300, 1023) for forwards in (0, 1, 4) for n in range(10)
        ]
        assert [mine.step_seconds(*step) for step in steps] == [theirs.step_seconds(*step) for step in steps]
    data = json.loads(path.read_text())
    assert data["version"] == 3 and set(data["sampled"]) == {
        "target_seconds",
        "draft_first_seconds",
        "draft_next_seconds",
    }


def test_missing_and_corrupt_files_raise_latency_error(tmp_path):
    with pytest.raises(LatencyError, match=r"'.*nothing\.json' does not exist.*specrl calibrate"):
        LatencyModel.load(tmp_path / "nothing.json")
    (tmp_path / "torn.json").write_text('{"format": "specrl-latency", "vers')
    with pytest.raises(LatencyError, match=r"torn\.json: not valid JSON"):
        LatencyModel.load(tmp_path / "torn.json")


# ---- the cache ---------------------------------------------------------------------------------------


def test_calibrated_learns_once_then_reads_the_cache(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(calibration, "learn", quick_learn(calls))
    monkeypatch.setattr(calibration, "profile", no_profile)  # the loop is the default
    first = calibrated(pair, k_max=2, progress=False)
    path = latency_path(pair)
    assert calls == [2] and path.is_file() and path.parent == tmp_path / "latency"
    assert device_key(pair.device) in path.name and "float32" in path.name and first.kind == "loop"
    monkeypatch.setattr(calibration, "learn", no_profile)
    again = calibrated(pair, k_max=2, progress=False)
    assert again.to_dict() == first.to_dict()
    assert calibrated(pair, k_max=1, progress=False).to_dict() == first.to_dict()  # covers fewer n too

    monkeypatch.setattr(calibration, "learn", quick_learn(calls))
    calibrated(pair, k_max=4, progress=False)  # the cache covers n <= 3 only: measured again
    calibrated(pair, k_max=4, recalibrate=True, progress=False)
    path.write_text("{")
    with pytest.warns(UserWarning, match="not valid JSON.*measuring again"):
        calibrated(pair, k_max=4, progress=False)
    assert calls == [2, 4, 4, 4]
    assert LatencyModel.load(path).n_max == 5


def test_a_calibration_measured_on_shared_cores_warns_and_names_the_fix(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    monkeypatch.setattr(calibration.os, "cpu_count", lambda: 2)
    monkeypatch.setattr(calibration.torch, "get_num_threads", lambda: 1)
    monkeypatch.setattr(calibration, "learn", quick_learn([]))
    loads = iter([0.3, 3.9])  # quiet at the start, busy by the end: processes started together
    monkeypatch.setattr(calibration, "current_load", lambda: next(loads))
    with pytest.warns(
        CalibrationWarning,
        match=r"other work shared the CPU \(load 3.9 on 2 CPUs, torch on 1 thread\).*"
        r"specrl calibrate --force",
    ):
        calibrated(pair, k_max=2, progress=False)
    assert latency_path(pair).is_file()  # cached all the same: the warning says how to replace it
    monkeypatch.setattr(calibration, "current_load", lambda: 1.4)  # one core busy, one for torch
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)
        calibrated(pair, k_max=2, recalibrate=True, progress=False)
    assert calibration.cpu_contention(torch.device("cpu"), load=1.6) is not None
    assert calibration.cpu_contention(torch.device("cuda"), load=9.0) is None  # a GPU's own clock


def test_calibrated_replaces_an_old_format_file_with_a_warning(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    path = latency_path(pair)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(OLD_FILE))
    calls = []
    monkeypatch.setattr(calibration, "learn", quick_learn(calls))
    with pytest.warns(
        UserWarning, match=r"format version 1, but this specrl reads version 3.*measuring again"
    ):
        model = calibrated(pair, k_max=2, progress=False)
    assert calls == [2] and LatencyModel.load(path).to_dict() == model.to_dict()


def test_calibrated_profile_method_is_cached_apart(pair, tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    calls = []
    monkeypatch.setattr(calibration, "profile", quick_profile(calls))
    monkeypatch.setattr(calibration, "learn", no_profile)
    model = calibrated(pair, k_max=2, progress=False, method="profile")
    assert calls == [2] and model.kind == "profiled"
    assert latency_path(pair, "profile").is_file() and not latency_path(pair).exists()
    assert latency_path(pair, "profile").name.endswith("__profiled.json")
    with pytest.raises(ValueError, match="method must be one of"):
        calibrated(pair, method="guess")


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
    assert replace(scenario, sampling=SamplingConfig(temperature=1.0)).latency_model(pair).mode == "sampled"
    with pytest.raises(ScenarioError, match=r"covers verifies of up to 4 tokens but k_max = 8 needs 9"):
        replace(scenario, k_max=8).latency_model(pair)
    LatencyModel.from_dict({**measured.to_dict(), "pair": "other"}).save(tmp_path / "models" / "lat.json")
    with pytest.raises(ScenarioError, match=r"measured for pair 'other'"):
        scenario.latency_model(pair)

    constant = Scenario(latency="constant", cost_model=CostModel(target_forward_s=0.02)).latency_model(pair)
    assert constant.kind == "constant" and constant.plain_tokens_per_s == pytest.approx(50.0)

    monkeypatch.setenv("SPECRL_HOME", str(tmp_path / "home"))
    calls = []
    monkeypatch.setattr(calibration, "learn", quick_learn(calls))
    monkeypatch.setattr(calibration, "profile", no_profile)
    learned = Scenario(k_max=2).latency_model(pair, progress=False)
    assert learned.n_max == 3 and learned.kind == "loop" and calls == [2]
    t1 = Scenario(k_max=2, sampling=SamplingConfig(temperature=1.0))
    assert t1.latency_model(pair, progress=False).mode == "sampled" and calls == [2]  # cached
    with pytest.raises(ValueError, match=r"latency must be one of \('calibrated', 'constant'\) or the path"):
        Scenario(latency="fast")


def test_env_modeled_seconds_and_rho_come_from_the_injected_model(pair, measured, prompt_file, monkeypatch):
    monkeypatch.setattr(calibration, "learn", no_profile)  # the scenario's own is never built
    monkeypatch.setattr(calibration, "profile", no_profile)
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


def calibrate(args: list[str]) -> LatencyModel:
    """``specrl calibrate ARGS``; the model it wrote (``--out``)."""
    assert main(["calibrate", *args]) == 0
    return LatencyModel.load(args[args.index("--out") + 1])


def test_specrl_calibrate_names_the_methods_the_library_has():
    from specrl.latency import METHODS
    from specrl.names import CALIBRATION_METHODS as COMMAND_METHODS  # the choices of --method

    assert tuple(COMMAND_METHODS) == tuple(METHODS)


def test_calibrate_profiles_on_request(pair, tmp_path, capsys):
    target, draft = pair.name.split("+")
    out = tmp_path / "lat.json"
    args = ["--target", target, "--draft", draft, "--device", "cpu", "--k-max", "2", "--method", "profile"]
    args += ["--repeats", "1", "--contexts", "8", "40", "--out", str(out)]
    model = calibrate(args)
    assert model.n_max == 3
    assert model.kind == "profiled"
    table = out.with_suffix(".md").read_text()
    assert "| n \\ context | 8 | 40 |" in table and "Held-out fit error (relative, at contexts [24])" in table
    assert table in capsys.readouterr().out
    again = calibrate(args)  # exists: reported, not measured again
    assert again.to_dict() == model.to_dict() and "exists; reporting it" in capsys.readouterr().out


def test_calibrate_learns_from_the_loop_and_refits_saved_steps(pair, tmp_path, capsys):
    target, draft = pair.name.split("+")
    out = tmp_path / "loop.json"
    args = ["--target", target, "--draft", draft, "--device", "cpu", "--k-max", "2", "--out", str(out)]
    model = calibrate([*args, "--steps", "200", "--save-steps"])
    assert model.kind == "loop"
    steps = tmp_path / "loop.steps.json"
    assert len(StepRecords.from_dict(json.loads(steps.read_text()))) == 200
    assert "**sampled**" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit):  # profile settings without --method profile: an error, not ignored
        main(["calibrate", *args, "--repeats", "9"])
    assert "add --method profile" in capsys.readouterr().err
    refit = calibrate([*args, "--force", "--from-steps", str(steps)])
    assert refit.costs["sampled"].target.tolist() == model.costs["sampled"].target.tolist()
    assert "refitting 200 steps" in capsys.readouterr().out
