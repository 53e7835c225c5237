"""Training pieces of the batch-aware policy: imitation of the rollout oracle's labels (DAgger),
and the validation callback that keeps the best checkpoint against the tuned schedule."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import VecNormalize
from tqdm.auto import tqdm

from specrl.batch_control.schedule import FIXED, batch_of, cutoff_from
from specrl.controllers.batch_schedule import BatchCutoffController, BatchScheduleController
from specrl.controllers.static import StaticController
from specrl.oracle import RolloutOracle
from specrl.trace_evaluation import controller_throughput, rates_by_batch
from specrl.training.comparison import geometric_mean
from specrl.training.run_folder import BEST_MODEL, BEST_NORMALIZER
from specrl.training.selection import policy_predict

IMITATION_TAUS = (0.0,)  # the cuts labelled: none (labelled cuts imitated worse, results/batch/)
LABEL_HORIZON = 1  # steps a label plays out: the action, then the schedule (1: the step alone)
LABEL_EVERY = 1  # one visited state labelled in this many (a label plays k_max + 1 runs)

FIT_BATCH, FIT_UPDATES = 256, 400  # the fit to the labels: minibatch, least Adam steps a round
PLAIN_FLOOR = 0.99  # a checkpoint's least throughput over plain decoding's at a fixed batch size
MACHINE = "machine"  # machine_of an env priced by one latency model outside a family


class PolicyController:
    """The model being trained as a controller (deterministic, behind its observation normaliser)."""

    def __init__(self, model: PPO, normalizer: VecNormalize) -> None:
        self.predict = policy_predict(model, normalizer)

    def reset(self) -> None:
        pass

    def act(self, observation):
        return self.predict(np.asarray(observation, dtype=np.float32)[None])[0]

    def observe(self, result) -> None:
        pass


class Validation(BaseCallback):
    """Score the policy on validation against the tuned schedule (``schedules``, by entry: a
    scenario or ``<scenario>@<profile>``) and plain decoding; keep the best (model, normaliser)
    by :meth:`rank`. With ``cutoff`` (one machine) a checkpoint is scored as it serves, switched
    off above the batch sizes where it is slower than plain decoding."""

    def __init__(
        self,
        envs: dict,
        schedules: Mapping[str, BatchScheduleController],
        episodes: int,
        folder: Path,
        cutoff: bool = True,
    ) -> None:
        super().__init__()
        self.envs, self.episodes, self.folder, self.cutoff = envs, episodes, folder, cutoff
        self.reference = {
            name: controller_throughput(env, schedules[name], episodes) for name, env in envs.items()
        }
        plain = StaticController(0)
        self.plain = {
            name: controller_throughput(env, plain, episodes)
            for name, env in envs.items()
            if scenario_of(name) in FIXED
        }
        self.best, self.best_rank, self.history = -np.inf, (False, -np.inf), []

    def vs_plain(self, ratios: dict[str, float]) -> dict[str, float]:
        """Ratios to the schedule -> throughput over plain decoding's, at the fixed batch sizes."""
        return {name: ratios[name] * self.reference[name] / plain for name, plain in self.plain.items()}

    @staticmethod
    def rank(score: float, worst_vs_plain: float) -> tuple[bool, float]:
        """Checkpoints that keep the floor by their score, ahead of those that do not, by their worst."""
        kept = worst_vs_plain >= PLAIN_FLOOR
        return kept, score if kept else worst_vs_plain

    def _on_step(self) -> bool:
        normalizer = self.model.get_env()
        controller = PolicyController(self.model, normalizer)
        ratios = {
            name: controller_throughput(env, controller, self.episodes) / self.reference[name]
            for name, env in self.envs.items()
        }
        cutoff = None
        if self.cutoff:
            cutoff = cutoff_from({batch_of(name): ratio for name, ratio in self.vs_plain(ratios).items()})
        if cutoff is not None:  # scored as it serves: switched off where it is slower than plain
            switched = BatchCutoffController(controller, cutoff)
            ratios = {
                name: controller_throughput(env, switched, self.episodes) / self.reference[name]
                for name, env in self.envs.items()
            }
        vs_plain = self.vs_plain(ratios)
        score = geometric_mean(ratios.values())
        worst = min(vs_plain.values(), default=np.inf)
        for name, ratio in ratios.items():
            self.logger.record(f"specdec/batch/ratio_vs_schedule/{name}", ratio)
        self.logger.record("specdec/batch/ratio_vs_schedule", score)
        self.logger.record("specdec/batch/worst_ratio_vs_plain", worst)
        self.history.append(
            {
                "timesteps": self.num_timesteps,
                "score": score,
                "ratios": ratios,
                "vs_plain": vs_plain,
                "cutoff": cutoff,
            }
        )
        print(
            f"{self.num_timesteps} steps: validation vs schedule {score:.3f} {ratios}; worst fixed size "
            f"vs plain {worst:.3f}; speculation off above {cutoff} rows",
            flush=True,
        )
        if self.rank(score, worst) > self.best_rank:
            self.best, self.best_rank = score, self.rank(score, worst)
            self.model.save(self.folder / BEST_MODEL)
            normalizer.save(str(self.folder / BEST_NORMALIZER))
        return True


def fit_to_labels(
    model: PPO, optimizer, inputs: torch.Tensor, costs: torch.Tensor, taus: list[int], seed: int
):
    """Fit the policy's (k, tau) distribution to minimise its expected regret on ``costs`` (states,
    k, len(taus)) at ``inputs``, its tau kept to the labelled ``taus``, a little entropy left."""
    generator = torch.Generator().manual_seed(seed)
    epochs = -(-FIT_UPDATES * FIT_BATCH // len(costs))
    for _ in range(epochs):
        for batch in torch.randperm(len(costs), generator=generator).split(FIT_BATCH):
            k_law, tau_law = model.policy.get_distribution(inputs[batch]).distribution
            kept = tau_law.probs[:, taus]  # the tau values labelled
            mass = kept.sum(1, keepdim=True)
            joint = k_law.probs[:, :, None] * (kept / mass)[:, None, :]
            expected_regret = (joint * costs[batch]).sum((1, 2)).mean()
            loss = expected_regret - 0.1 * mass.log().mean() - 0.01 * k_law.entropy().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


def scenario_of(entry: str) -> str:
    """The scenario of a validation entry (``<scenario>`` or ``<scenario>@<profile>``)."""
    return entry.partition("@")[0]


def machine_of(env) -> str:
    """The machine pricing ``env``'s episode now: its latency profile's name when the env draws
    from a family (a perturbed model under its profile's), else :data:`MACHINE`."""
    return env.latency.measurement.get("profile", MACHINE)


def imitate(
    model: PPO,
    normalizer: VecNormalize,
    envs: dict,
    schedules: Mapping[str, BatchScheduleController],
    rounds: int,
    episodes: int,
    seed: int,
    horizon: int = LABEL_HORIZON,
    every: int = LABEL_EVERY,
) -> list[dict]:
    """DAgger toward one step of policy iteration over the schedule, in place on ``model``.

    One visited state in ``every`` is labelled with the regret of every (k, tau) by the
    :class:`~specrl.oracle.RolloutOracle` over the schedule of the episode's machine
    (:func:`machine_of`), its rates measured on that machine. Round 0 follows the schedule, later
    rounds the policy, which is fit to every label so far (:func:`fit_to_labels`). Returns each
    round's fit: labelled states, the policy's mean regret, the best single (k, tau)'s."""
    tau_grid = next(iter(envs.values())).tau_grid
    taus = [tau_grid.index(tau) for tau in IMITATION_TAUS]
    observations, regrets, fits = [], [], []
    rates: dict[tuple[str, object], dict[int, float]] = {}  # (scenario, its model) -> the oracle's rates

    def oracle(name: str, env) -> RolloutOracle:
        schedule = schedules[machine_of(env)]
        key = (name, env.latency)  # the model itself (hashed by identity), held by the key
        if key not in rates:
            rates[key] = rates_by_batch(env.priced_by(env.latency), schedule, 1, prefill=horizon > 1)
        return RolloutOracle(env, rates[key], schedule, horizon)

    optimizer = torch.optim.Adam(model.policy.parameters(), lr=1e-3)
    for round_ in range(rounds):
        learner, start = PolicyController(model, normalizer), len(regrets)
        for name, env in tqdm(envs.items(), desc=f"imitation round {round_ + 1}/{rounds}", leave=False):
            for episode in range(episodes):
                observation, _ = env.reset(seed=seed + 1000 * round_ + episode)
                labeller = oracle(name, env)
                behaviour = labeller.continuation if round_ == 0 else learner
                done, step = False, 0
                while not done:
                    if step % every == 0:
                        observations.append(observation)
                        regrets.append(labeller.regrets(IMITATION_TAUS))
                    observation, _, done, _, _ = env.step(behaviour.act(observation))
                    step += 1
        normalizer.obs_rms.update(np.asarray(observations[start:], dtype=np.float64))  # this round's states
        inputs = torch.as_tensor(normalizer.normalize_obs(np.asarray(observations, dtype=np.float32)))
        costs = torch.as_tensor(np.asarray(regrets, dtype=np.float32))  # (states, k, len(taus))
        fit_to_labels(model, optimizer, inputs, costs, taus, seed + round_)
        with torch.no_grad():
            mode = model.policy.get_distribution(inputs).mode()
        k, tau = mode[:, 0], torch.as_tensor([taus.index(t) if t in taus else 0 for t in mode[:, 1].tolist()])
        regret, constant = float(costs[torch.arange(len(costs)), k, tau].mean()), float(costs.mean(0).min())
        fits.append({"states": len(costs), "policy_regret": regret, "best_constant_regret": constant})
        print(
            f"imitation round {round_ + 1}/{rounds}: {len(costs)} states, the policy's mean regret "
            f"{regret:.3f} plain steps (the best single k and tau: {constant:.3f})",
            flush=True,
        )
    return fits
