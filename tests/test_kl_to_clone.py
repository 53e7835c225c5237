"""The penalty that keeps PPO near the warm start's clone (``KLToClone``): each step's reward loses
``coef`` times the policy's KL divergence from the clone in that state, the advantages follow the
penalised rewards, and the clone a run starts with is the one it resumes with."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback

from specrl.training.callbacks import KLToClone
from specrl.training.run_folder import CLONE, load_clone, save_clone


class Toy(gym.Env):
    """Random observations, a MultiDiscrete action (as specrl's [k, tau, stop]), reward = k."""

    observation_space = gym.spaces.Box(0.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.MultiDiscrete([4, 3])

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action):
        self.t += 1
        return self.observation_space.sample(), float(action[0]), self.t >= 8, False, {}


class Snapshot(BaseCallback):
    """The rollout buffer's rewards and advantages when its turn comes at the rollout's end."""

    def __init__(self) -> None:
        super().__init__()
        self.rewards: list[np.ndarray] = []
        self.advantages: list[np.ndarray] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self.rewards.append(self.model.rollout_buffer.rewards.copy())
        self.advantages.append(self.model.rollout_buffer.advantages.copy())


def toy_model() -> PPO:
    return PPO("MlpPolicy", Toy(), n_steps=32, batch_size=32, n_epochs=1, seed=0, device="cpu")


def far_clone(model: PPO) -> torch.nn.Module:
    clone = copy.deepcopy(model.policy)
    with torch.no_grad():
        clone.action_net.bias.copy_(torch.tensor([3.0, -3.0, 0.0, 0.0, 2.0, -2.0, 0.0]))
    return clone


def test_the_divergence_is_zero_from_itself_and_summed_over_the_action_dimensions():
    model = toy_model()
    same = KLToClone(copy.deepcopy(model.policy), coef=1.0)
    same.init_callback(model)
    states = np.random.default_rng(0).random((16, 3), dtype=np.float32)
    assert np.allclose(same.divergence(states), 0.0, atol=1e-6)
    far = KLToClone(far_clone(model), coef=1.0)
    far.init_callback(model)
    kl = far.divergence(states)
    with torch.no_grad():
        ours = model.policy.get_distribution(torch.as_tensor(states)).distribution
        theirs = far.clone.get_distribution(torch.as_tensor(states)).distribution
        by_hand = sum(
            (p.probs * (p.probs.log() - q.probs.log())).sum(-1) for p, q in zip(ours, theirs, strict=True)
        )
    assert np.allclose(kl, by_hand.numpy(), atol=1e-5) and (kl > 0.1).all()


def test_the_rewards_lose_coef_times_the_log_ratio_of_the_action_taken():
    model = toy_model()
    model.learning_rate, model.lr_schedule = 0.0, lambda _: 0.0  # no update: the rollout's weights stay
    before, after = Snapshot(), Snapshot()
    penalty = KLToClone(far_clone(model), coef=0.5)
    model.learn(32, callback=[before, penalty, after])
    buffer = model.rollout_buffer
    states, actions = buffer.observations.reshape(32, -1), buffer.actions.reshape(32, -1)
    with torch.no_grad():
        ours = model.policy.get_distribution(torch.as_tensor(states)).log_prob(torch.as_tensor(actions))
        theirs = penalty.clone.get_distribution(torch.as_tensor(states)).log_prob(torch.as_tensor(actions))
    log_ratio = (ours - theirs).numpy().reshape(32, 1)
    assert np.allclose(before.rewards[0] - after.rewards[0], 0.5 * log_ratio, atol=1e-5)
    # the clone favours k = 0 and the first tau strongly, the fresh policy does not: on average
    # the actions taken are the clone's less often than its own, so the penalty is positive
    assert log_ratio.mean() > 0.5
    # GAE ran again on the penalised rewards
    assert after.advantages[0].mean() < before.advantages[0].mean()
    assert np.allclose(buffer.returns, buffer.advantages + buffer.values, atol=1e-5)


def test_the_penalty_steers_ppo_towards_the_clone():
    # reward = k pulls towards k = 3; a clone sure of k = 0 and a large coefficient pull back
    free, held = toy_model(), toy_model()
    penalty = KLToClone(far_clone(held), coef=5.0)
    free.learn(2048)
    held.learn(2048, callback=penalty)
    states = np.random.default_rng(1).random((256, 3), dtype=np.float32)

    def mean_k(model: PPO) -> float:
        return float(model.predict(states, deterministic=True)[0][:, 0].mean())

    assert mean_k(held) < mean_k(free) - 1.0


def test_a_non_positive_coefficient_is_refused():
    with pytest.raises(ValueError, match="kl_to_clone must be positive"):
        KLToClone(toy_model().policy, coef=0.0)


def test_the_clone_saved_at_the_start_is_the_one_loaded_on_resume(tmp_path):
    model = toy_model()
    clone = far_clone(model)
    save_clone(tmp_path, clone)
    assert (tmp_path / CLONE).is_file() and not list(tmp_path.glob(".*tmp"))
    restored = copy.deepcopy(model.policy)
    load_clone(tmp_path, restored)
    for name, tensor in clone.state_dict().items():
        assert torch.equal(restored.state_dict()[name], tensor)
    with pytest.raises(FileNotFoundError, match="trained without kl_to_clone"):
        load_clone(tmp_path / "elsewhere", restored)
