"""Continuous batching in the real loop (``specrl.serving.continuous``): requests that arrive over
time join the running batch when a row is free and decode as they would alone; the busy clock
charges the batch's own work and skips idle waits; bad input is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import prompts, reference_greedy

import specrl
from specrl.controllers.batch_schedule import BatchScheduleController
from specrl.envs import load_scenario
from specrl.latency.calibration import machine_prices
from specrl.latency.family import profiles
from specrl.serving import TimedRequest, scenario_requests, serve_continuous


def requests(vocab_size: int, arrivals: list[float]) -> list[TimedRequest]:
    texts = prompts(len(arrivals), vocab_size, seed=5)
    return [
        TimedRequest(text[: 2 + 3 * (i % 4)], at)
        for i, (text, at) in enumerate(zip(texts, arrivals, strict=True))
    ]


@pytest.mark.parametrize("max_batch", [1, 3])
def test_every_request_decodes_as_alone_and_the_batch_never_exceeds_its_rows(close_pair, max_batch):
    served = requests(close_pair.vocab_size, [0.0, 0.0, 0.0, 0.0, 1e-4, 1e-4, 1e6])  # the last comes late
    controller = BatchScheduleController({1: 3, 3: 1})  # k changes with the batch's rows
    run = serve_continuous(
        close_pair, controller, served, max_batch=max_batch, max_new_tokens=10, stop_at_eos=False
    )
    for i, request in enumerate(served):
        assert run.outputs[i] == reference_greedy(close_pair.target, request.prompt_ids, 10), i
    assert max(run.batch_sizes) == max_batch
    if max_batch == 3:
        assert set(run.ks) == {3, 1}  # the schedule saw the batch grow and shrink
    assert run.tokens == 10 * len(served)
    # the busy clock skipped the idle wait for the late request, which finished after it arrived
    assert run.finished_at[-1] > 1e6 and run.busy_seconds < 60
    assert 0 < run.prefill_seconds < run.busy_seconds
    assert run.tokens_per_s == pytest.approx(run.tokens / run.busy_seconds)


def test_a_request_arriving_later_joins_a_running_batch(close_pair):
    """The second request arrives just after the first (on the busy clock), so it is not there when
    the batch starts, and joins the running batch at the next step, its prefill charged then. (An
    arrival in the middle of a run would depend on how fast this machine runs the steps.)"""
    served = requests(close_pair.vocab_size, [0.0, 1e-9])
    run = serve_continuous(close_pair, specrl.StaticController(0), served, 4, 24, stop_at_eos=False)
    assert run.batch_sizes[:2] == [1, 2]  # it joined mid-flight, after the first step, not at the start
    start, joined = run.admissions  # the record the batch simulator's prefill is checked against
    assert (start.rows, start.slots) == (0, 0) and start.prompt_lengths == [2]
    assert (joined.rows, joined.slots) == (1, 2) and joined.prompt_lengths == [5]  # 2 tokens cached
    assert start.seconds + joined.seconds == pytest.approx(run.prefill_seconds)
    assert run.finished_at[1] > run.finished_at[0]  # it started a step later, with the same budget


class Recording(specrl.StaticController):
    """k = 1, keeping every observation it was given."""

    def __init__(self) -> None:
        super().__init__(1)
        self.seen = []

    def act(self, observation):
        self.seen.append(observation.copy())
        return super().act(observation)


def test_the_policy_sees_the_machines_prices_as_in_the_batch_simulator(close_pair):
    """With ``prices`` (the machine's batched latency model) the verification's curve features are
    its curve at the batch's rows, as the batch simulator shows them; without, a flat curve (0)."""
    from specrl.features import FEATURE_NAMES

    model = profiles(batch=True)["cpu-xeon-2t"]
    shape = [FEATURE_NAMES.index(f"verify_step_{tokens}") for tokens in range(2, 10)]
    served = requests(close_pair.vocab_size, [0.0, 0.0, 0.0])
    seen = {}
    for label, prices in (("priced", model.price_line), ("none", None)):
        controller = Recording()
        serve_continuous(close_pair, controller, served, 3, 6, stop_at_eos=False, prices=prices)
        seen[label] = controller.seen[0][shape]
    assert not seen["none"].any()
    expected = np.clip(model.price_line(3, 5).shape(), 0.0, 1.0)  # 3 rows of 2, 5 and 8 tokens: 5
    assert expected.any() and seen["priced"] == pytest.approx(expected, abs=1e-6)


class PriceReading(Recording):
    """A :class:`Recording` that, like a policy of feature version 4 or later, brings this
    machine's prices when the loop is given none."""

    def machine_prices(self, pair):
        return machine_prices(pair, "PriceReading")


def test_a_loop_given_no_prices_takes_this_machines_cached_calibrations(close_pair, tmp_path, monkeypatch):
    """No calibration cached: a policy that reads prices warns once (naming the fix) and runs
    without a prior; an older policy neither warns nor looks. Once this machine's batch calibration
    is cached, a loop given no ``prices`` shows its curve at the batch's rows; a step of one row is
    priced by the single-sequence calibration when that is cached too."""
    import warnings

    from specrl.features import FEATURE_COUNTS, FEATURE_NAMES
    from specrl.latency.store import latency_path

    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    shipped, older = specrl.LearnedController.load("default"), specrl.LearnedController.load("default")
    older.n_features = FEATURE_COUNTS[3]  # as a policy of feature version 3 reads
    with pytest.warns(UserWarning, match="no calibration .* is cached.*calibrated"):
        assert shipped.machine_prices(close_pair) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert shipped.machine_prices(close_pair) is None  # once per process and pair

    batch, loop = profiles(batch=True)["cpu-xeon-2t"], profiles()["gpu-like-h200"]
    batch.save(latency_path(close_pair, "batch"))
    shape = [FEATURE_NAMES.index(f"verify_step_{tokens}") for tokens in range(2, 10)]
    controller = PriceReading()
    serve_continuous(
        close_pair, controller, requests(close_pair.vocab_size, [0.0] * 3), 3, 6, stop_at_eos=False
    )
    expected = np.clip(batch.price_line(3, 5).shape(), 0.0, 1.0)
    assert expected.any() and controller.seen[0][shape] == pytest.approx(expected, abs=1e-6)

    assert older.machine_prices(close_pair) is None  # version 3 reads no prices: it never looks
    loop.save(latency_path(close_pair))
    prices = shipped.machine_prices(close_pair)
    assert prices(1, 100) == loop.price_line(1, 100) and prices(3, 100) == batch.price_line(3, 100)


def test_bad_requests_are_refused_by_name(close_pair):
    controller = specrl.StaticController(1)
    with pytest.raises(ValueError, match="no requests"):
        serve_continuous(close_pair, controller, [], 4, 8)
    with pytest.raises(ValueError, match="max_batch"):
        serve_continuous(close_pair, controller, requests(close_pair.vocab_size, [0.0]), 0, 8)
    with pytest.raises(ValueError, match="arrival order"):
        serve_continuous(close_pair, controller, requests(close_pair.vocab_size, [1.0, 0.0]), 4, 8)


def test_the_arrivals_scenario_draws_requests_over_time_and_a_fixed_batch_at_once(tiny_home):
    _, pair = tiny_home
    scenario = load_scenario("arrivals")  # its load is relative to the machine's plain capacity
    slow, fast = (profiles(batch=True)[name] for name in ("cpu-xeon-2t", "gpu-like-h200"))
    arrivals = scenario_requests(scenario, pair, "test", seed=0, count=12, latency=slow)
    times = [request.arrival for request in arrivals]
    assert times == sorted(times) and len(set(times)) == 12  # one at a time, in order
    again = scenario_requests(scenario, pair, "test", seed=0, count=12, latency=slow)
    assert [r.prompt_ids for r in again] == [r.prompt_ids for r in arrivals]  # the seed fixes them
    faster = scenario_requests(scenario, pair, "test", seed=0, count=12, latency=fast)
    assert [r.prompt_ids for r in faster] == [r.prompt_ids for r in arrivals]
    speed = fast.plain_throughput(64) / slow.plain_throughput(64)  # the same load, on a faster clock
    assert [r.arrival * speed for r in faster] == pytest.approx(times)
    with pytest.raises(ValueError, match="pass the latency model"):
        scenario_requests(scenario, pair, "test", seed=0, count=12)
    fixed = scenario_requests(load_scenario("batch_4"), pair, "test", seed=0, count=8)
    assert len(fixed) == 8 and all(request.arrival == 0.0 for request in fixed)
