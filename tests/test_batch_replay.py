"""The batch simulator: the batched latency model and specrl/BatchReplay-v0.

Each row replays its trace exactly as the single-row simulator does; a step costs the batch's
modeled time; a fixed batch stays full while requests remain; under a load the batch follows the
arrivals; the latency model interpolates, round-trips its file, refuses what it does not cover,
and is measured through the engine's own batched cache.
"""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import specrl.envs  # noqa: F401 - registers the envs
from specrl import batch_control, trace_evaluation
from specrl.batch_control import imitation
from specrl.envs.batch_replay import BatchReplayEnv
from specrl.envs.scenario import BatchSpec, DomainShift, Scenario, ScenarioError
from specrl.envs.trace_replay import arrival_times
from specrl.latency import LatencyError, LatencyModel
from specrl.latency.batch import calibration_runs, measure_batch_latency
from specrl.oracle import RolloutOracle, batch_clairvoyant

SIZES, TOKENS, CONTEXTS = (1, 4, 16, 64), tuple(range(1, 10)), (33, 161, 321)  # grids 32, 160, 320 wide


def synthetic_latency(verify_scale: list | None = None) -> LatencyModel:
    """Seconds that grow with B x n and with the context, as a real calibration's do."""
    target = np.array([[[0.016 + 0.001 * b * n + 1e-5 * c for c in CONTEXTS] for n in TOKENS] for b in SIZES])
    draft = np.array([[0.003 + 0.0002 * b + 1e-6 * c for c in CONTEXTS] for b in SIZES])
    return LatencyModel(
        "specrl-zoo-small", "test", CONTEXTS, target, draft, batch_sizes=SIZES, kind="batch",
        verify_scale=verify_scale, prefill=(0.01, 1e-4, 1e-7, 1e-6),
    )  # fmt: skip


def test_latency_over_batch_sizes_interpolates_in_batch_and_context_and_round_trips(tmp_path):
    latency = synthetic_latency()
    assert latency.target_seconds(3, 161, rows=4) == pytest.approx(0.016 + 0.012 + 0.00161)
    between = latency.target_seconds(3, 97, rows=8)  # linear in B and in the context between grid points
    assert between == pytest.approx(0.016 + 0.001 * 8 * 3 + 1e-5 * 97)
    assert latency.target_seconds(1, 1000, rows=128) == latency.target_seconds(1, 321, rows=64)  # nearest
    draft, verify = latency.step_seconds(161, 4, 4, rows=16)
    assert draft == pytest.approx(4 * (0.003 + 0.0032 + 0.000161))
    assert verify == pytest.approx(latency.target_seconds(5, 161, rows=16))
    # the batch of one is a slice: what a single sequence's methods see
    assert latency.step_seconds(161, 2, 1) == latency.step_seconds(161, 2, 1, rows=1)
    assert latency.target_table[0, 1] == pytest.approx(0.016 + 0.001 + 0.00161)
    # the real steps' scales per size and tokens per row: at 16 rows, 1.5 at n = 1 and 1.2 above
    scaled = synthetic_latency(verify_scale=[[1.0] * 9, [1.2] * 9, [1.5] + [1.2] * 8, [2.0] * 9])
    assert scaled.step_seconds(161, 4, 4, rows=16) == pytest.approx((draft, 1.2 * verify))
    plain_16 = latency.target_seconds(1, 161, rows=16)
    assert scaled.step_seconds(161, 0, 0, rows=16)[1] == pytest.approx(1.5 * plain_16)
    assert scaled.step_seconds(161, 0, 1, rows=8)[1] == pytest.approx(
        1.2 * latency.target_seconds(2, 161, rows=8)
    )
    assert scaled.step_seconds(161, 0, 0, rows=8)[1] == pytest.approx(
        1.3 * latency.target_seconds(1, 161, rows=8)
    )
    assert latency.plain_throughput(16, 161) == pytest.approx(16 / plain_16)
    # two prompts (longest 41 tokens, 40 prefilled) joining 6 rows on 100 slots: a copy of 8 x 100
    assert latency.prefill_seconds([30, 41], rows=6, context_length=101) == pytest.approx(
        0.01 + 1e-4 * 80 + 1e-7 * 2 * 1600 + 1e-6 * 800
    )
    assert latency.prefill_seconds([30, 41]) < latency.prefill_seconds([30, 41], 6, 101)
    # beyond the tabulated tokens per row: linear from the last two rows, as for one sequence
    assert latency.target_seconds(10, 161, rows=4) == pytest.approx(0.016 + 0.001 * 4 * 10 + 0.00161)
    with pytest.raises(LatencyError, match=r"verify_scale has shape \(2,\), expected \(4, 9\)"):
        synthetic_latency(verify_scale=[1.0, 2.0])
    path = tmp_path / "batch.json"
    scaled.save(path)
    again = LatencyModel.load(path)
    assert again.to_dict() == scaled.to_dict() and again.batch_sizes == SIZES
    assert again.step_seconds(201, 3, 2, rows=8) == scaled.step_seconds(201, 3, 2, rows=8)
    assert again.prefill_seconds([12], 3, 41) == scaled.prefill_seconds([12], 3, 41)
    assert "at 16 rows" in scaled.to_markdown()


def test_calibration_interleaves_the_ks_at_each_batch_size():
    """Drift over a run falls on every k alike: each size's ks alternate direction, round after round."""
    one_size = [0, 2, 2, 0, 0, 2]
    assert calibration_runs((1, 8), (0, 2), 3) == [(1, k) for k in one_size] + [(8, k) for k in one_size]


def test_batch_latency_is_measured_through_the_batched_cache_and_calibrated_on_real_steps(pair):
    latency = measure_batch_latency(
        pair,
        k_max=2,
        batch_sizes=(1, 4),
        widths=(8, 24),
        repeats=1,
        ks=(0, 2, 4),
        rounds=2,
        max_new_tokens=6,
        progress=False,
    )
    costs = latency.costs["greedy"]
    assert costs.target.shape == (2, 3, 2) and costs.draft_first.shape == (2, 2)
    assert (costs.target > 0).all() and (costs.draft_first == costs.draft_next).all()
    assert latency.kind == "batch" and latency.contexts == (9, 25) and latency.batch_sizes == (1, 4)
    assert latency.n_max == 3 and latency.pair == pair.name
    assert latency.draft_scale.shape == (2,) and latency.verify_scale.shape == (2, 3)
    assert (latency.draft_scale > 0).all() and (latency.verify_scale > 0).all()
    assert min(latency.prefill) >= 0 and latency.prefill_seconds([20], 3, 31) > 0
    calibration = latency.measurement["calibration"]
    # k = 4 is beyond k_max; each (size, k) ran twice, and a run of 6 tokens takes at least 6 // 3 steps
    assert calibration["ks"] == [0, 2] and calibration["rounds"] == 2
    assert calibration["steps"] > 2 * 2 * 2 * 6 // 3
    assert calibration["admissions"] > 2 * 2 * 2  # rows joined the running batches


def scenario(**batch) -> Scenario:
    base = specrl.envs.load_scenario("batch_4")
    return Scenario.from_dict({**_plain(base), "batch": batch})


def _plain(base: Scenario) -> dict:
    return {
        "pair": {"preset": "small"},
        "prompts": {"domains": dict(base.prompts.domains)},
        "sampling": {"temperature": 0.0},
    }


def test_the_env_follows_gymnasiums_contract():
    env = gym.make(
        "specrl/BatchReplay-v0", scenario="batch_4", latency=synthetic_latency(), split="validation"
    )
    check_env(env.unwrapped, skip_render_check=True)


def test_each_row_replays_its_trace_as_the_single_row_simulator_does():
    """batch_1 with one request: the rows' step results equal TraceReplay-v0 on the same trace."""
    latency = synthetic_latency()
    env = BatchReplayEnv(scenario(size=1, requests=1), latency=latency, split="validation")
    env.reset(seed=3)
    segment = env.active[0].segment
    # constant prices: what a step emits does not depend on them (the scenario's own would calibrate)
    constant = LatencyModel.from_cost_model(specrl.envs.load_scenario("mixed").cost_model)
    single = gym.make("specrl/TraceReplay-v0", scenario="mixed", split="validation", latency=constant)
    single = single.unwrapped
    index = next(i for i, t in enumerate(single.traces.traces) if t.segments[0].tokens == segment.tokens)
    single.reset(seed=0, options={"trace_index": index})
    done, ks = False, [3, 0, 5, 1, 8, 2]
    step = 0
    while not done:
        action = np.array([ks[step % len(ks)], step % 3])
        _, _, done, _, info = env.step(action)
        _, _, single_done, _, single_info = single.step(action)
        mine, theirs = info["step_results"][0], single_info["step_result"]
        assert (mine.proposed, mine.accepted, mine.emitted, mine.tokens) == (
            theirs.proposed, theirs.accepted, theirs.emitted, theirs.tokens
        )  # fmt: skip
        assert mine.confidences == theirs.confidences
        assert done == single_done
        step += 1


def test_a_step_costs_the_batchs_time_and_a_fixed_batch_stays_full():
    latency = synthetic_latency(verify_scale=[[1.0] * 9, [1.1] * 9, [1.4] * 9, [2.0] * 9])
    env = BatchReplayEnv(scenario(size=4, requests=12), latency=latency, split="validation")
    observation, info = env.reset(seed=0)
    assert info["batch_size"] == 4
    first = [row.segment.prompt_length for row in env.active]
    assert env.busy_seconds == pytest.approx(latency.prefill_seconds(first))  # the first prefill
    waiting, total, done, prefills, drafts = [], 0, False, 0, []
    while not done:
        rows = list(env.active)
        if env.next_request < len(env.requests):  # requests still queued: the batch is full
            waiting.append(len(rows))
        width = env.grid.width
        assert width >= max(r.segment.prompt_length + r.position for r in rows) - 1
        _, reward, done, _, info = env.step(np.array([3, 0]))
        results = info["step_results"]
        proposed = max(r.proposed for r in results)
        forwards = max(len(r.confidences) for r in results)
        draft, verify = latency.step_seconds(
            width + 1, forwards, proposed, rows=len(rows)
        )  # the grid's width
        joined = [row for row in env.active if row not in rows]
        assert info["slots"] == width
        alone = latency.prefill_seconds([r.segment.prompt_length for r in joined])
        assert info["prefill_seconds"] > alone if joined else info["prefill_seconds"] == 0.0  # + the join
        prefills += bool(joined)
        assert info["seconds"] == pytest.approx(draft + verify + info["prefill_seconds"])
        assert reward == pytest.approx(info["tokens"] - env.reference_tokens_per_s * info["seconds"])
        total += info["tokens"]
        drafts.append(info["drafts"])  # vLLM's num_drafts: one per row that drafted
        assert info["drafts"] == sum(r.proposed > 0 for r in results)
    assert max(drafts) == 4
    assert env.served == 12 and total == sum(r.segment.end for r in env.requests)
    assert waiting and set(waiting) == {4}  # full while requests wait, then it drains
    assert prefills >= 2  # finished rows were replaced, and their prompts paid a prefill


def test_preview_prices_a_step_without_taking_it():
    """The oracles' preview: what a step with k would emit and cost, equal to the step then taken,
    and nothing about the episode moves."""
    env = BatchReplayEnv(scenario(size=4, requests=8), latency=synthetic_latency(), split="validation")
    env.reset(seed=1)
    done, k, varied = False, 0, False
    while not done:
        positions = [row.position for row in env.active]
        previews = {j: env.preview(j) for j in range(env.scenario.k_max + 1)}
        assert [row.position for row in env.active] == positions
        k = (k + 3) % (env.scenario.k_max + 1)
        _, _, done, _, info = env.step(np.array([k, 0]))
        assert previews[k] == (info["tokens"], pytest.approx(info["seconds"] - info["prefill_seconds"]))
        varied |= len({tokens for tokens, _ in previews.values()}) > 1
    assert varied  # the outcomes really depend on k


def batch_sizes(env: BatchReplayEnv, seed: int) -> list[int]:
    """The rows of every step of one episode at k = 2."""
    env.reset(seed=seed)
    done, seen = False, []
    while not done:
        _, _, done, _, info = env.step(np.array([2, 0]))
        seen.append(info["batch_size"])
    return seen


def test_under_a_load_the_batch_follows_the_arrivals():
    quiet, busy = [(30.0, 0.05)], [(30.0, 50.0)]
    sizes = {}
    for name, load in (("quiet", quiet), ("busy", busy)):
        env = BatchReplayEnv(
            scenario(load=[list(p) for p in load], max_size=16, requests=48),
            latency=synthetic_latency(),
            split="validation",
        )
        sizes[name] = batch_sizes(env, seed=1)
        assert env.served == 48
    assert max(sizes["quiet"]) <= 2 and max(sizes["busy"]) == 16
    times = arrival_times(((10.0, 1.0), (10.0, 0.0)), 200, np.random.default_rng(0))
    assert all(int(t // 10) % 2 == 0 for t in times)  # nothing arrives in the phases of rate 0
    assert times == sorted(times)


def test_a_load_relative_to_the_machine_brings_the_same_requests_on_a_slow_and_a_fast_one():
    """``load_unit: plain``: durations in plain request times, rates as shares of plain decoding's
    capacity with the batch full; a machine twice as fast gets the same phases in half the time,
    and the simulator's batch fills the same way on both."""
    slow, fast = synthetic_latency(), synthetic_latency(verify_scale=[[0.5] * len(TOKENS)] * len(SIZES))
    relative = BatchSpec(load=((10.0, 0.1), (5.0, 3.0)), load_unit="plain", max_size=16, requests=40)
    on_slow, on_fast = relative.seconds_load(slow, 128), relative.seconds_load(fast, 128)
    unit = 128 / slow.plain_throughput(16)  # seconds plain decoding takes per request with 16 rows
    assert np.allclose(on_slow, [(10.0 * unit, 0.1 / unit), (5.0 * unit, 3.0 / unit)])
    assert fast.plain_throughput(16) > 1.5 * slow.plain_throughput(16)
    for (slow_s, slow_rate), (fast_s, fast_rate) in zip(on_slow, on_fast, strict=True):
        assert fast_s < slow_s and slow_s * slow_rate == pytest.approx(fast_s * fast_rate)
    absolute = BatchSpec(load=((10.0, 0.1),))
    assert absolute.seconds_load(None, 128) == absolute.load  # seconds are seconds everywhere
    with pytest.raises(ValueError, match=r"load_unit: plain.*pass the latency model"):
        relative.seconds_load(None, 128)
    rows = {}
    for name, latency in (("slow", slow), ("fast", fast)):
        env = BatchReplayEnv(
            scenario(load=[[10.0, 0.1], [5.0, 3.0]], load_unit="plain", max_size=16, requests=40),
            latency=latency,
            split="validation",
        )
        rows[name] = batch_sizes(env, seed=3)
    assert max(rows["slow"]) == max(rows["fast"]) == 16  # the burst fills the batch on both
    assert abs(np.mean(rows["slow"]) - np.mean(rows["fast"])) < 0.15 * np.mean(rows["slow"])


def test_bad_batch_sections_are_refused_by_name():
    with pytest.raises(ScenarioError, match="batch.size must be >= 1"):
        Scenario.from_dict({"batch": {"size": 0}})
    with pytest.raises(ScenarioError, match=r"batch.load.*\[seconds, requests_per_second\]"):
        Scenario.from_dict({"batch": {"load": [60, 1.0]}})
    with pytest.raises(ScenarioError, match=r"batch.load_unit must be one of \('seconds', 'plain'\)"):
        Scenario.from_dict({"batch": {"load": [[60, 1.0]], "load_unit": "minutes"}})
    with pytest.raises(ScenarioError, match="every phase has rate 0"):
        Scenario.from_dict({"batch": {"load": [[60, 0.0]]}})
    assert BatchSpec(load=((60.0, 1.0),)).arrivals and not BatchSpec(size=8).arrivals
    pool = Scenario.from_dict(
        {**_plain(specrl.envs.load_scenario("batch_4")), "drafters": ["draft", "ngram"]}
    )
    with pytest.raises(ValueError, match=r"no price for the drafters \['ngram'\]"):
        BatchReplayEnv(pool, latency=synthetic_latency())
    shifting = scenario(size=4, requests=8)
    shifting = replace(shifting, shift=(DomainShift(64, "prose"),))
    with pytest.raises(ValueError, match="only one row at a time replays; its batch holds up to 4"):
        BatchReplayEnv(shifting, latency=synthetic_latency())


def test_the_batch_size_schedule_reads_the_batch_from_the_observation_and_is_tuned_per_size():
    from specrl.batch_control.schedule import schedule_from_best_k
    from specrl.controllers.batch_schedule import BatchScheduleController
    from specrl.features import FeatureTracker, GenerationSettings

    schedule = BatchScheduleController({4: 4, 8: 2, 32: 1})  # TensorRT-LLM's example
    assert [schedule.action_at(b).k for b in (1, 4, 5, 8, 9, 32, 33, 256)] == [4, 4, 2, 2, 1, 1, 0, 0]
    for batch in (1, 3, 8, 17, 64):
        tracker = FeatureTracker(GenerationSettings(128, 256, 48, batch_size=batch), prompt_length=10)
        assert schedule.act(tracker.vector()).k == schedule.action_at(batch).k
    # tuned at 1, 4, 16, 64: each k holds up to the geometric middle; 0 above the last k > 0
    assert schedule_from_best_k({1: 4, 4: 3, 16: 1, 64: 0}) == {2: 4, 8: 3, 32: 1}
    assert schedule_from_best_k({1: 3, 4: 3, 16: 0, 64: 0}) == {8: 3}
    assert schedule_from_best_k({1: 0, 4: 0}) == {1: 0}
    with pytest.raises(ValueError, match="schedule is empty"):
        BatchScheduleController({})
    env = BatchReplayEnv(scenario(size=16, requests=16), latency=synthetic_latency(), split="validation")
    observation, _ = env.reset(seed=0)
    _, _, _, _, info = env.step(BatchScheduleController({4: 4, 16: 1}).act(observation))
    assert info["k"] == 1 and info["batch_size"] == 16


def test_the_one_step_oracle_takes_the_k_of_least_regret_and_beats_every_static_k():
    """The one-step clairvoyant (oracle.batch_clairvoyant): each step's k is the one whose
    previewed gain is highest, so its regret is 0; knowing the outcomes, it emits faster than any
    static k at a batch of one."""
    env = BatchReplayEnv(scenario(size=1, requests=6), latency=synthetic_latency(), split="validation")
    static = {
        k: trace_evaluation.controller_throughput(env, specrl.StaticController(k), 2)
        for k in range(env.scenario.k_max + 1)
    }
    best = max(static, key=static.get)
    env.reset(seed=0)
    oracle = RolloutOracle(env, {0: static[best]})
    regrets = oracle.regrets((0.0, 0.5))
    assert regrets.shape == (env.scenario.k_max + 1, 2) and regrets.min() == 0.0
    assert oracle.act(None).k == int(regrets[:, 0].argmin())
    assert batch_clairvoyant(env, specrl.StaticController(best), 2) > static[best]


def test_episodes_tallied_one_by_one_pair_controllers_on_the_same_draws():
    """Paired standard errors and the k by batch size: each episode tallied on its own, the
    same as the pooled run; episodes differ (other requests), a replay of the same seed does not;
    every step is counted at its batch size and k."""
    from specrl.evaluation.intervals import paired_ratio_interval

    env = BatchReplayEnv(scenario(size=4, requests=8), latency=synthetic_latency(), split="validation")
    tallies = trace_evaluation.play_episodes(env, specrl.StaticController(3), 3)
    pooled = trace_evaluation.pooled_throughput(tallies)
    assert pooled == pytest.approx(trace_evaluation.controller_throughput(env, specrl.StaticController(3), 3))
    episodes = [t.throughput for t in tallies]
    assert len(set(episodes)) == 3 and min(episodes) <= pooled <= max(episodes)
    again = [t.throughput for t in trace_evaluation.play_episodes(env, specrl.StaticController(3), 3)]
    same = paired_ratio_interval(again, episodes)
    assert again == episodes and (same.low, same.high, same.n) == (1.0, 1.0, 3)
    plain = [t.throughput for t in trace_evaluation.play_episodes(env, specrl.StaticController(0), 3)]
    spread = paired_ratio_interval(episodes, plain)
    assert spread.low < spread.high
    for tally in tallies:
        assert {k for _, k in tally.steps} == {3} and {size for size, _ in tally.steps} <= set(range(1, 5))
        assert (4, 3) in tally.steps


def test_checkpoint_selection_puts_the_plain_floor_before_the_score():
    """train_batch.py keeps a checkpoint slower than plain decoding at some fixed batch size only if
    no checkpoint keeps the floor, however well it scores against the schedule."""
    rank, floor = imitation.Validation.rank, imitation.PLAIN_FLOOR
    assert rank(1.00, floor) > rank(1.30, floor - 0.01)  # the floor first
    assert rank(1.10, 1.00) > rank(1.05, 1.20)  # then the score
    assert rank(0.90, floor - 0.01) > rank(1.20, floor - 0.05)  # below it, the least bad worst size


def test_a_fork_plays_on_without_moving_the_episode():
    """BatchReplayEnv.fork: the copy steps as the env would (same tokens, seconds, observations),
    and the env, its queue and its grid stay where they were."""
    env = BatchReplayEnv(scenario(size=4, requests=10), latency=synthetic_latency(), split="validation")
    env.reset(seed=2)
    for k in (2, 0, 5):
        env.step(np.array([k, 0]))
    before = ([row.position for row in env.active], env.grid.width, env.grid.lengths, env.clock)
    observation = env.features.vector()
    twin, played, ks = env.fork(), [], []
    while twin.served < env.served + 2 and not (played and played[-1][2]):
        ks.append((3, 1, 8, 0, 4, 2, 6)[len(ks) % 7])
        played.append(twin.step(np.array([ks[-1], 0])))
    assert twin.next_request > env.next_request  # rows finished and new ones joined in the copy
    assert ([row.position for row in env.active], env.grid.width, env.grid.lengths, env.clock) == before
    assert np.array_equal(env.features.vector(), observation)
    assert all(row.position == 0 for row in env.requests)  # the queue is never played
    for k, (twin_obs, reward, done, _, info) in zip(ks, played, strict=True):
        mine = env.step(np.array([k, 0]))
        assert np.array_equal(mine[0], twin_obs) and mine[1] == reward and mine[2] == done
        assert (mine[4]["tokens"], mine[4]["seconds"]) == (info["tokens"], info["seconds"])


def test_the_rollout_oracle_prices_each_k_by_the_steps_that_follow_it():
    """train_batch.py's labels: over one step they are the one-step oracle's; over a horizon, each
    k's gain is what a fork taking k and then the continuation plays, and the episode stays put."""
    env = BatchReplayEnv(scenario(size=4, requests=8), latency=synthetic_latency(), split="validation")
    env.reset(seed=0)
    env.step(np.array([2, 0]))
    lam = {0: 30.0}
    priced = np.array([[env.preview(k, tau) for tau in (0.0, 0.5)] for k in range(env.scenario.k_max + 1)])
    previewed = priced[..., 0] - lam[0] * priced[..., 1]  # the next step's gains, known in advance
    one_step = (previewed.max() - previewed) / (lam[0] * priced[0, 0, 1])
    plain = specrl.StaticController(0)
    assert np.allclose(RolloutOracle(env, lam, plain, 1).regrets((0.0, 0.5)), one_step)
    positions = [row.position for row in env.active]
    regrets = RolloutOracle(env, lam, plain, 200).regrets()
    assert [row.position for row in env.active] == positions
    gains, prefills = [], 0.0
    for k in range(env.scenario.k_max + 1):
        twin, gain, action = env.fork(), 0.0, np.array([k, 0])
        for _ in range(200):
            _, _, done, _, info = twin.step(action)
            gain += info["tokens"] - lam[0] * info["seconds"]  # past one step, prefill counts
            prefills += info["prefill_seconds"]
            action = np.array([0, 0])
            if done:
                break
        gains.append(gain)
    assert prefills > 0  # requests were admitted within the horizon
    expected = (max(gains) - np.array(gains)) / (lam[0] * env.preview(0)[1])
    assert np.allclose(regrets[:, 0], expected) and regrets.min() == 0.0
    assert not np.allclose(regrets[:, 0], one_step[:, 0])  # looking ahead changes the labels
    with pytest.raises(ValueError, match="horizon must be at least 1"):
        RolloutOracle(env, lam, plain, 0)


def test_imitation_fits_the_policy_to_the_labels_of_the_run_that_follows():
    """imitation.imitate: labels one state in ``every`` by the rollout oracle over the schedule and
    fits the policy to them; after a round its expected-regret fit does at least as well as the best
    single k on the states it saw, and a second round (following the policy) adds its states."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from specrl.controllers.batch_schedule import BatchScheduleController

    def make():
        return BatchReplayEnv(scenario(size=4, requests=6), latency=synthetic_latency(), split="validation")

    venv = VecNormalize(DummyVecEnv([make]), norm_reward=False)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, seed=0, verbose=0)
    envs = {"batch_4": make()}
    schedules = {imitation.MACHINE: BatchScheduleController({4: 2})}
    fits = imitation.imitate(model, venv, envs, schedules, rounds=2, episodes=1, seed=0, horizon=8, every=3)
    assert len(fits) == 2 and fits[1]["states"] > fits[0]["states"] > 0
    for fit in fits:
        assert fit["policy_regret"] <= fit["best_constant_regret"] + 1e-6
    assert fits[0]["best_constant_regret"] > 0  # the labels do tell the ks apart


def test_imitation_over_a_family_labels_each_episode_under_its_own_machines_schedule():
    """imitation.imitate over a family of batch models: each episode follows (and its oracle rates
    come from) the schedule of the machine it drew (imitation.machine_of), not one schedule for all."""
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from specrl.controllers.batch_schedule import BatchScheduleController
    from specrl.latency import LatencyFamily

    family = LatencyFamily(("gpu-like-a100", "gpu-like-l4"), perturbations=1, batch=True)

    def make():
        return BatchReplayEnv(scenario(size=4, requests=6), latency=family, split="validation")

    class Recording(BatchScheduleController):
        def __init__(self, schedule, env):
            super().__init__(schedule)
            self.env, self.machines = env, set()

        def act(self, observation):
            self.machines.add(imitation.machine_of(self.env))
            return super().act(observation)

    env = make()
    schedules = {name: Recording({4: k}, env) for name, k in (("gpu-like-a100", 2), ("gpu-like-l4", 0))}
    venv = VecNormalize(DummyVecEnv([make]), norm_reward=False)
    model = PPO("MlpPolicy", venv, n_steps=64, batch_size=64, seed=0, verbose=0)
    fits = imitation.imitate(model, venv, {"batch_4": env}, schedules, rounds=1, episodes=6, seed=0, every=4)
    assert fits[0]["states"] > 0
    for name, schedule in schedules.items():
        assert schedule.machines == {name}  # played only on its own machine (perturbed ones included)
    with pytest.raises(KeyError):  # a machine with no schedule tuned for it is an error, not a guess
        only_a100 = {"gpu-like-a100": schedules["gpu-like-a100"]}
        imitation.imitate(model, venv, {"batch_4": env}, only_a100, rounds=1, episodes=6, seed=0)


def test_the_cutoff_switches_any_controller_off_above_its_batch_size_and_is_tuned_on_validation():
    """BatchCutoffController: the controller's action up to max_batch rows, plain decoding above, and
    every outcome still observed; batch_control.tune_cutoff ends speculation where it stops paying."""
    from specrl.controllers.batch_schedule import BatchCutoffController
    from specrl.features import FeatureTracker, GenerationSettings

    class Recording(specrl.StaticController):
        def __init__(self, k):
            super().__init__(k)
            self.seen = 0

        def observe(self, result):
            self.seen += 1

    inner = Recording(4)
    cut = BatchCutoffController(inner, max_batch=8)
    for batch, k in ((1, 4), (8, 4), (9, 0), (64, 0)):
        tracker = FeatureTracker(GenerationSettings(128, 256, 48, batch_size=batch), prompt_length=10)
        assert cut.act(tracker.vector()).k == k
    env = BatchReplayEnv(scenario(size=16, requests=16), latency=synthetic_latency(), split="validation")
    observation, _ = env.reset(seed=0)
    _, _, _, _, info = env.step(cut.act(observation))
    cut.observe(info["step_result"])
    assert info["k"] == 0 and inner.seen == 1
    with pytest.raises(ValueError, match="max_batch is the largest batch"):
        BatchCutoffController(inner, 0)

    sizes = {
        name: BatchReplayEnv(
            scenario(size=size, requests=size), latency=synthetic_latency(), split="validation"
        )
        for name, size in (("batch_1", 1), ("batch_4", 4), ("batch_16", 16))
    }
    plain = specrl.StaticController(0)
    assert batch_control.tune_cutoff(sizes, plain, 1) is None  # never slower than itself
    assert batch_control.cutoff_from({1: 1.3, 4: 1.1, 16: 0.97, 64: 0.9}) == 8  # between 4 and 16
    assert batch_control.cutoff_from({1: 1.3, 4: 1.1, 16: 1.0, 64: 0.99}) == 32
    assert batch_control.cutoff_from({4: 0.9, 1: 0.8}) == 1 and batch_control.cutoff_from({1: 1.0}) is None
    deep = specrl.StaticController(8)
    controller_throughput = trace_evaluation.controller_throughput
    vs_plain = {
        batch_control.batch_of(n): controller_throughput(e, deep, 1) / controller_throughput(e, plain, 1)
        for n, e in sizes.items()
    }
    assert batch_control.tune_cutoff(sizes, deep, 1) == batch_control.cutoff_from(vs_plain)
    assert batch_control.with_cutoff({"ppo": plain}, None) == {"ppo": plain}
    assert batch_control.with_cutoff({"ppo": plain}, 4)["ppo+cutoff"].max_batch == 4


def train_batch_smoke(tmp_path, monkeypatch, *profiles: str, perturbations: int | None = None):
    """The batch training on one small scenario (batch_1) with a synthetic latency for this machine,
    so no calibration runs: one imitation round of one episode, no PPO. Returns (policy, runs)."""
    from specrl.batch_control.train import BatchTrainOptions, train_batch

    monkeypatch.setattr(
        Scenario, "latency_model", lambda scenario, pair, *args, **kwargs: synthetic_latency()
    )
    out, runs = tmp_path / "policy", tmp_path / "runs"
    options = BatchTrainOptions(
        imitation_rounds=1,
        imitation_episodes=1,
        timesteps=0,
        episodes=1,
        latency_profiles=list(profiles),
        perturbations=perturbations,
        out=str(out),
        runs_dir=str(runs),
        fixed=["batch_1"],
        arrivals=[],
    )
    assert train_batch(options, "test") == out
    return out, runs


@pytest.mark.slow
def test_train_batch_writes_train_ppos_run_folder_and_exports_with_parity(tmp_path, monkeypatch):
    """train_batch.py and train_ppo.py write the same run folder (run.json, config.yaml, best.zip and
    its observation statistics) and export through the same export, which checks parity. One small
    scenario and a synthetic latency, so no calibration runs."""
    import json

    import yaml

    from specrl.export import load_policy

    out, runs = train_batch_smoke(tmp_path, monkeypatch, "machine")
    (run_dir,) = runs.iterdir()
    assert run_dir.name.startswith("batch_mix__train_batch__0__")
    record = json.loads((run_dir / "run.json").read_text())
    assert yaml.safe_load((run_dir / "config.yaml").read_text()) == json.loads(json.dumps(record))
    assert record["ppo"]["n_steps"] == 256 and list(record["scenarios"]) == [
        "batch_1"
    ]  # ppo.yaml's batch keys
    assert (run_dir / "best.zip").is_file() and (run_dir / "best_vecnormalize.pkl").is_file()
    policy = load_policy(out)
    assert policy.metadata["provenance"]["seed"] == 0 and policy.metadata["evaluation"]["run_dir"] == str(
        run_dir
    )
    assert policy.metadata["latency_profiles"]["profiles"] == ["machine"]


@pytest.mark.slow
def test_train_batch_over_a_family_tunes_a_schedule_per_machine_and_selects_under_each(tmp_path, monkeypatch):
    """The batch training over profile NAMES: every profile gets its schedule, checkpoints are
    scored under each selection profile against its own schedule, with no cut-off (it belongs to
    one machine), and the policy's metadata records the family."""
    from specrl.export import load_policy

    profiles = ["gpu-like-a100", "gpu-like-l4"]
    out, _ = train_batch_smoke(tmp_path, monkeypatch, *profiles, perturbations=0)
    metadata = load_policy(out).metadata
    assert metadata["latency_profiles"]["profiles"] == profiles and metadata["latency_profiles"]["batch"]
    assert metadata["latency_profiles"]["selected_under"] == profiles
    evaluation = metadata["evaluation"]
    assert set(evaluation["schedule"]) == set(profiles)
    (checkpoint,) = evaluation["validation_vs_schedule"]
    assert set(checkpoint["ratios"]) == {f"batch_1@{name}" for name in profiles}
    assert set(checkpoint["vs_plain"]) == set(checkpoint["ratios"]) and checkpoint["cutoff"] is None


@pytest.mark.slow
def test_the_batch_simulator_prices_a_comparison_with_a_profile_of_the_family():
    """A batch replay priced by a profile of the family (GPU-like ones here, which have no
    calibration scales): the schedule is tuned under that profile's batch model, plays its k at every
    step, and plain decoding's throughput follows the profile's model."""
    from specrl.latency.family import profiles

    models = profiles(batch=True)
    plain = {}
    for name in ("gpu-like-h200", "gpu-like-a100"):
        latency = models[name]
        assert latency.verify_scale is None
        validation = BatchReplayEnv("batch_1", latency=latency, split="validation")
        test = BatchReplayEnv("batch_1", latency=latency, split="test")
        best_k, schedule = batch_control.tune_schedule({"batch_1": validation}, 1)
        (scheduled,) = trace_evaluation.play_episodes(test, specrl.BatchScheduleController(schedule), 1)
        (size, k), *others = scheduled.steps
        assert not others and size == 1 and k == schedule[min(schedule)] == best_k[1]
        plain[name] = trace_evaluation.controller_throughput(test, specrl.StaticController(0), 1)
    modeled = models["gpu-like-h200"].plain_throughput(1) / models["gpu-like-a100"].plain_throughput(1)
    assert plain["gpu-like-h200"] / plain["gpu-like-a100"] == pytest.approx(modeled, rel=0.1)
