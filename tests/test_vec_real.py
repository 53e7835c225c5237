"""PPO on the real loop: SpecDecodeEnv rows in SB3's SubprocVecEnv (one process each) step as they
do in this process, end episodes with the replay's counts, and train."""

from __future__ import annotations

import csv
from dataclasses import replace

import numpy as np
import pytest
from stable_baselines3 import PPO

from specrl.envs import load_scenario
from specrl.envs.vec_real import real_loop_vec_env
from specrl.latency import LatencyModel
from specrl.training.callbacks import SpecdecMetrics


def tiny_scenarios():
    return [
        replace(load_scenario(name).with_overrides(preset="tiny", time="modeled"), max_new_tokens=16)
        for name in ("code", "prose_t1")
    ]


def constant_latency() -> LatencyModel:
    return LatencyModel.from_cost_model(tiny_scenarios()[0].cost_model)


def roll(venv, steps: int) -> tuple[list, list, list]:
    venv.seed(3)
    observations, rewards, ends = [venv.reset()], [], []
    actions = np.random.default_rng(0).integers(0, 5, size=(steps, venv.num_envs, 3)) % [9, 10, 1]
    for action in actions:
        observation, reward, done, infos = venv.step(action[:, : len(venv.action_space.nvec)])
        observations.append(observation)
        rewards.append(reward)
        ends += [
            (i, info["episode_summary"].steps, info["episode_summary"].k_sum)
            for i, info in enumerate(infos)
            if done[i]
        ]
    venv.close()
    return observations, rewards, ends


@pytest.mark.slow  # two processes load the tiny pair: ~15 s
def test_subprocess_envs_step_as_in_process_ones_and_report_episode_counts(tiny_home):
    scenarios = tiny_scenarios()
    here = roll(real_loop_vec_env(scenarios, [1, 1], constant_latency(), subprocesses=False), 40)
    there = roll(real_loop_vec_env(scenarios, [1, 1], constant_latency(), subprocesses=True), 40)
    np.testing.assert_array_equal(np.stack(there[0]), np.stack(here[0]))
    # DummyVecEnv buffers rewards in float32, SubprocVecEnv stacks the envs' float64
    np.testing.assert_array_equal(np.stack(there[1]).astype(np.float32), np.stack(here[1]))
    assert there[2] == here[2] and len(here[2]) >= 2  # episodes ended, with their step counts
    assert all(steps > 0 and k_sum >= 0 for _, steps, k_sum in here[2])


@pytest.mark.slow  # a few hundred real-loop steps in two processes: ~20 s
def test_ppo_trains_on_real_loop_envs_in_subprocesses_and_logs_specdec_scalars(tiny_home, tmp_path):
    from stable_baselines3.common.logger import configure

    venv = real_loop_vec_env(tiny_scenarios(), [1, 1], constant_latency(), subprocesses=True)
    model = PPO("MlpPolicy", venv, n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")
    model.set_logger(configure(str(tmp_path), ["csv"]))
    before = {name: p.detach().clone() for name, p in model.policy.named_parameters()}
    metrics = SpecdecMetrics(venv.get_attr("tau_grid")[0])
    model.learn(total_timesteps=128, callback=metrics)
    venv.close()
    # two rollouts of 2 envs x 32 steps, each followed by a gradient epoch of two minibatches
    assert model.num_timesteps == 128
    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    trained = [row for row in rows if row.get("train/n_updates")]
    # SB3 logs an update when the next rollout starts: the last one trained but is not in the log
    assert model._n_updates == 2 and [int(float(row["train/n_updates"])) for row in trained] == [1]
    assert all(float(row["train/approx_kl"]) > 0 and np.isfinite(float(row["train/loss"])) for row in trained)
    # the actor and the critic both moved: every layer's weights, not some parameter somewhere
    moved = {
        name: float((p.detach() - before[name]).abs().max()) for name, p in model.policy.named_parameters()
    }
    assert all(change > 0 for name, change in moved.items() if "weight" in name), moved
    assert any(float(row.get("specdec/tokens_per_s") or 0) > 0 for row in rows)
    assert any(row.get("specdec/episodes") for row in rows)
