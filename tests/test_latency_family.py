"""The latency family: the machines a portable policy trains over, and the env that draws them."""

from __future__ import annotations

import numpy as np
import pytest

from specrl.envs import CostModel, TraceReplayEnv
from specrl.features import FEATURE_NAMES, STEP_NORM
from specrl.latency import HELD_OUT, GpuLike, LatencyError, LatencyFamily, LatencyModel, perturbed
from specrl.latency.cost_model import CONSTANT_DRAFTER_COSTS
from specrl.latency.family import PROFILES_DIR, STEP_HEIGHTS, profiles, profiles_known
from specrl.training.inputs import (
    FAMILY,
    MACHINE,
    SELECT_BATCH_PROFILES,
    SELECT_PROFILES,
    Machines,
    training_machines,
)


def test_the_training_family_holds_out_this_machine_and_a_gpu_and_draws_reproducibly():
    family = LatencyFamily.training()
    assert not set(HELD_OUT) & set(family.names) and set(HELD_OUT) <= set(profiles_known())
    assert any(n.startswith("cpu-") for n in family.names) and any(
        n.startswith("gpu-like-") for n in family.names
    )
    assert all(len(group) == family.perturbations + 1 for group in family.models)
    draws = [family.draw(np.random.default_rng(seed)) for seed in range(40)]
    assert draws[:5] == [family.draw(np.random.default_rng(seed)) for seed in range(5)]  # the same objects
    assert len({model.measurement["profile"] for model in draws}) >= 4
    again = LatencyFamily.training().models
    for mine, theirs in zip(family.models, again, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            assert a.price_line(1, 256).curve == pytest.approx(
                b.price_line(1, 256).curve
            )  # one seed: one family
    with pytest.raises(LatencyError, match="unknown latency profile"):
        LatencyFamily(("no-such-machine",))


def test_the_batch_family_prices_batches_and_holds_out_the_same_machines():
    """LatencyFamily(batch=True): the batch simulator's models, the measured batch calibrations
    (profiles/batch/) and the GPU-like profiles over batch sizes; the held-out ones stay out."""
    family = LatencyFamily.training(batch=True)
    assert not set(HELD_OUT) & set(family.names) and "cpu-xeon-2t" in profiles_known(batch=True)
    assert any(n.startswith("cpu-") for n in family.names) and "gpu-like-a100" in family.names
    for group in family.models:
        assert all(model.batch_sizes == group[0].batch_sizes for model in group)
        assert group[0].batch_sizes[-1] == 64
    gpu = family.profile("gpu-like-a100")
    assert gpu.prefill_seconds([60], 0, 0) > gpu.target_seconds(1, 64)  # admitting a prompt is a forward
    small, large = (gpu.price_line(rows, 256).ratios(rows)[1] for rows in (1, 64))
    assert large > 2 * small  # a full batch fills the device: a verified token costs more
    assert family.describe()["batch"] and not LatencyFamily.training().describe()["batch"]
    with pytest.raises(LatencyError, match="unknown batch latency profile"):
        LatencyFamily(("cpu-epyc-2t-nov",), batch=True)  # a one-row calibration prices no batch


def test_perturbed_scales_the_draft_and_the_verifications_growth():
    base = LatencyModel.from_cost_model(CostModel(0.002, 0.010, 0.001))  # verify .010 + .001 (n - 1)
    model = perturbed(base, draft_factor=2.0, growth_factor=0.5)
    assert model.draft_seconds(100) == pytest.approx(0.004)
    assert model.target_seconds(1, 100) == pytest.approx(0.010)  # a one-token verification is kept
    assert model.target_seconds(5, 100) == pytest.approx(0.010 + 0.5 * 0.004)
    assert model.price_line().per_token == pytest.approx(0.5 * base.price_line().per_token)
    assert model.measurement["perturbed"] == {"draft": 2.0, "growth": 0.5}
    with pytest.raises(ValueError, match="factors must be > 0"):
        perturbed(base, 0.0, 1.0)


def test_a_stepped_perturbation_makes_a_staircase_the_features_see():
    """From ``step_at`` tokens a row on, every verification costs the step more: the tokens before
    it keep their prices, and the shape features show the step at its token; the family steps
    every other perturbation, at token counts inside the tables."""
    base = GpuLike("line", target_ms=10.0, knee=16, jump=0.0, below=0.16, draft_ratio=0.1, kv=0.0).model()
    model = perturbed(base, 1.0, 1.0, step=0.2, step_at=4)  # base: 10 ms x (1 + 0.01 n), n = 1..9
    one = base.target_seconds(1, 100)
    assert [model.target_seconds(n, 100) for n in (1, 3)] == pytest.approx(
        [base.target_seconds(n, 100) for n in (1, 3)]
    )
    assert model.target_seconds(4, 100) == pytest.approx(base.target_seconds(4, 100) + 0.2 * one)
    assert model.target_seconds(9, 100) - model.target_seconds(4, 100) == pytest.approx(0.0005)
    shape = model.price_line(1, 100).shape()
    assert shape[2] == pytest.approx(shape[1] + 0.2 / STEP_NORM) and shape[3] == pytest.approx(shape[1])
    assert model.measurement["perturbed"] == {"draft": 1.0, "growth": 1.0, "step": 0.2, "step_at": 4}
    with pytest.raises(ValueError, match="step_at"):
        perturbed(base, 1.0, 1.0, step=0.2, step_at=1)
    family = LatencyFamily(("cpu-xeon-2t", "gpu-like-a100"), perturbations=4)
    for group in family.models:
        steps = [m.measurement["perturbed"].get("step", 0.0) for m in group[1:]]
        assert [step > 0 for step in steps] == [False, True, False, True]
        assert all(STEP_HEIGHTS[0] <= step <= STEP_HEIGHTS[1] for step in steps[1::2])
        assert all(2 <= m.measurement["perturbed"]["step_at"] <= m.n_max for m in group[2::2])


def test_a_gpu_like_verification_steps_once_stays_flat_to_its_knee_then_grows_linearly():
    gpu = GpuLike("test", target_ms=10.0, knee=16, jump=0.1, below=0.05, draft_ratio=0.04, kv=0.0)
    model = gpu.model(batch_sizes=(1, 8))
    assert model.target_seconds(1, 256) == pytest.approx(0.010 * (1 + 0.05 / 16))
    assert model.target_seconds(2, 256) == pytest.approx(0.010 * (1 + 0.1 + 0.05 * 2 / 16))
    at_knee = 0.010 * (1 + 0.1 + 0.05)
    assert model.target_seconds(4, 256, rows=8) == pytest.approx(at_knee * 32 / 16)  # 32 tokens: past it
    assert model.draft_seconds(256) == pytest.approx(0.04 * 0.010)
    one_row, eight_rows = (model.price_line(rows, 256).ratios(rows) for rows in (1, 8))
    assert one_row[1] < 0.02 < 0.3 < eight_rows[1]  # one more token a row: nearly free, then not


def test_an_env_over_a_family_prices_each_episode_by_the_machine_it_draws(shifted, greedy_traces):
    family = LatencyFamily(("cpu-epyc-2t-nov", "gpu-like-a100"), perturbations=0)
    env = TraceReplayEnv(shifted, traces=greedy_traces, latency=family)
    seen = {}
    for seed in range(12):
        observation, info = env.reset(seed=seed)
        machine = env.latency
        seen[info["latency_profile"]] = machine
        assert env.reference_tokens_per_s == pytest.approx(machine.plain_throughput())
        prior = machine.price_line(1, env.features.context_length)
        prices = observation[FEATURE_NAMES.index("draft_price") :][:2]
        assert prices == pytest.approx(prior.ratios(1), rel=1e-5)  # the machine's prices, before a step
        shape = observation[FEATURE_NAMES.index("verify_step_2") :][:8]
        assert shape == pytest.approx(np.clip(prior.shape(), 0, 1), rel=1e-5, abs=1e-7)  # and its curve
        _, reward, *_ = env.step(env.action_space.sample())
        env.reset(seed=seed)
        assert env.latency is machine  # the same seed draws the same machine
    assert len(seen) == 2
    cpu, gpu = (seen[name].price_line().ratios(1) for name in ("cpu-epyc-2t-nov", "gpu-like-a100"))
    assert cpu[1] > 3 * gpu[1]  # a verified token costs a CPU far more than a GPU below its knee


def test_training_machines_name_this_machine_the_family_or_profiles():
    latency = LatencyModel.from_cost_model()
    assert training_machines([MACHINE], latency) == Machines(None, {MACHINE: latency})
    machines = training_machines([FAMILY], latency)
    family = machines.family
    assert family == LatencyFamily.training() and list(machines.select) == list(SELECT_PROFILES)
    assert all(machines.select[name] is family.profile(name) for name in SELECT_PROFILES)  # loaded once
    assert not set(SELECT_PROFILES) & set(HELD_OUT)  # never selected on a held-out machine
    batch = training_machines([FAMILY], latency, batch=True)
    assert batch.family == LatencyFamily.training(batch=True)
    assert list(batch.select) == list(SELECT_BATCH_PROFILES)
    assert batch.describe()["selected_under"] == list(SELECT_BATCH_PROFILES) and batch.describe()["batch"]
    machines = training_machines(["gpu-like-h200"], latency, perturbations=0)
    alone = machines.family
    assert alone.names == ("gpu-like-h200",) and alone.perturbations == 0
    assert list(machines.select) == ["gpu-like-h200"]
    assert len(alone.models[0]) == 1
    # the metadata's held_out: every profile not trained over (the shipped family's: HELD_OUT)
    assert set(training_machines([FAMILY], latency).describe()["held_out"]) == set(HELD_OUT)
    never = machines.describe()["held_out"]
    assert "gpu-like-h200" not in never and {"cpu-xeon-2t", "gpu-like-a100"} <= set(never)
    with pytest.raises(ValueError, match="not"):
        training_machines([MACHINE, FAMILY], latency)
    with pytest.raises(ValueError, match=r"do not all price the drafters \['draft-fp8'\].*profiles machine"):
        training_machines([FAMILY], latency, drafters=("draft", "draft-mid", "draft-fp8"))


def test_a_family_can_be_scored_under_profiles_of_its_own_chosen_apart():
    import argparse

    from specrl.training.inputs import check_latency_profile_arguments
    from specrl.training.options import PROFILE_OPTIONS, add_arguments

    latency = LatencyModel.from_cost_model()
    names = ["cpu-epyc-2t-nov", "cpu-epyc-2t-profiled", "gpu-like-a100", "gpu-like-h100"]
    machines = training_machines(names, latency, select=SELECT_PROFILES)
    assert machines.family.names == tuple(names) and list(machines.select) == list(SELECT_PROFILES)
    assert machines.describe()["selected_under"] == list(SELECT_PROFILES)
    parser = argparse.ArgumentParser()
    add_arguments(parser, PROFILE_OPTIONS)

    def check(line: str) -> None:
        check_latency_profile_arguments(parser, parser.parse_args(line.split()))

    check(f"--latency-profiles {' '.join(names)} --select-profiles gpu-like-a100")
    check("--select-profiles cpu-epyc-2t-nov")  # one of the shipped family's
    for bad in (
        f"--latency-profiles {' '.join(names)} --select-profiles gpu-like-l4",  # not trained over
        "--select-profiles cpu-xeon-2t",  # held out of the shipped family
        "--latency-profiles machine --select-profiles cpu-epyc-2t-nov",
    ):
        with pytest.raises(SystemExit):
            check(bad)


def test_every_profile_prices_the_pool_measured_prices_first():
    """The pool trains over the family: every profile prices every drafter. A calibration's own
    measured prices stand (the Xeon's; the EPYC Dec calibration's lookup); the rest are the EPYC
    measurement of Dec 1, and the model says which it filled in."""
    every = profiles()
    for name, model in every.items():
        assert not model.unpriced(list(CONSTANT_DRAFTER_COSTS)), name
    xeon, epyc = every["cpu-xeon-2t"], every["cpu-epyc-2t-dec"]
    assert "drafter_costs_from" not in xeon.measurement
    assert xeon.drafter_costs["draft-int8"] != CONSTANT_DRAFTER_COSTS["draft-int8"]  # measured there
    assert epyc.drafter_costs["ngram"] != CONSTANT_DRAFTER_COSTS["ngram"]  # its own, kept
    assert epyc.drafter_costs["draft-int4"] == CONSTANT_DRAFTER_COSTS["draft-int4"]
    (filled,) = epyc.measurement["drafter_costs_from"].values()
    assert "ngram" not in filled and "draft-int4" in filled
    assert epyc.mode == LatencyModel.load(PROFILES_DIR / "cpu-epyc-2t-dec.json").mode
