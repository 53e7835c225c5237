"""Train a batch-aware PPO policy in the batch simulator and export it (a first cut of issue 12's
policy; ``train_ppo.py`` remains the main job for single-sequence control).

The policy sees the features of the batch as one step (``batch_size`` among them) and chooses one
(k, tau) for every row. It trains on the **train** traces of a mix of fixed batches (``batch_1``,
``batch_4``, ``batch_16``, ``batch_64``) and the ``serving`` load, in two stages:

1. **Imitation** (DAgger, ``--imitation-rounds``): one step of policy iteration over the tuned
   batch-size schedule. Every visited state (one in ``--label-every``) is labelled with every
   k's regret over the run that follows it: the k on a fork of the episode, then the schedule
   for up to ``--label-horizon`` steps (``batch_sim.RolloutOracle``; the default, 1, is the step
   alone, what the one-step clairvoyant of ``batch_sim.py`` sees). Round 0 follows the
   schedule; later rounds follow the policy, and the states it reaches are labelled the same
   way. The policy network is fit to every label so far by its expected regret (tau index 0: a
   cut's regret is predicted too weakly by the past), so it learns the k that pays, as far as
   the past predicts it. One step ahead, the labels ask for speculation at 64 rows that a whole
   run does not repay; 64 to 256 steps ahead they ask for none there, but the policies fit to
   them lost more at small batches than they saved (``results/batch/labels.md``,
   ``experiments/label_horizon.py``, and ``results/notes/batch.md``).
2. **PPO** from there (``--timesteps``), one scenario per env.

After imitation and every ``--eval-freq`` steps of PPO, the deterministic policy is scored on the
**validation** traces against the batch-size schedule tuned there (``batch_sim.py``'s tuning), as
it serves: with speculation switched off above the batch sizes where it is slower than plain
decoding (``BatchCutoffController``, the cut-off ``batch_sim.cutoff_from`` its ratios at the
fixed sizes; ``batch_sim.py`` and ``batch_real.py`` tune the same cut-off for their
``ppo+cutoff`` row). The best checkpoint is exported: the best geometric mean over the scenarios
among the checkpoints that keep the floor, at least ``PLAIN_FLOOR`` of plain decoding at every
fixed batch size (the issue's bar is 0.98 in the real loop; the simulator's floor is tighter,
as its prices err by a few percent at large batches). If none keeps it, the one whose worst
fixed size is best. Report on test with ``python experiments/batch_sim.py --policy
specrl/policies/batch``.

    python experiments/train_batch.py                         # specrl/policies/batch
    python experiments/train_batch.py --imitation-rounds 1 --timesteps 20000 --out /tmp/batch_policy  # smoke
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback, EveryNTimesteps
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor, VecNormalize
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batch_sim import (  # noqa: E402
    FIXED,
    SERVING,
    RolloutOracle,
    batch_of,
    cutoff_from,
    rates_by_batch,
    throughput,
    tune_schedule,
)

import specrl  # noqa: E402
from specrl.controllers.batch_schedule import BatchCutoffController, BatchScheduleController  # noqa: E402
from specrl.envs import load_scenario  # noqa: E402
from specrl.envs.batch_replay import BatchReplayEnv, scenario_batch_latency  # noqa: E402
from specrl.evaluation.machine import command_line  # noqa: E402
from specrl.export import export_policy  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HYPERPARAMETERS = REPO / "specrl" / "policies" / "ppo.yaml"
# the cuts the imitation stage labels: none. With (0.0, 0.3, 0.5, 0.7) the imitated policy did worse on
# validation (0.963 of the schedule against 0.992, 4 rounds of 4 episodes): the past predicts a cut's
# regret too weakly, and the labels cost a replay of every k per tau.
IMITATION_TAUS = (0.0,)
LABEL_HORIZON = 1  # steps a label plays out: the action, then the schedule (1: the step alone)
LABEL_EVERY = 1  # one visited state labelled in this many (a label plays k_max + 1 runs)
FIT_BATCH, FIT_UPDATES = 256, 400  # the fit to the labels: minibatch, least Adam steps a round
PLAIN_FLOOR = 0.99  # a checkpoint's least throughput over plain decoding's at a fixed batch size


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--timesteps", type=int, default=200_000, help="PPO env steps over all envs")
    parser.add_argument("--imitation-rounds", type=int, default=4, help="DAgger rounds before PPO (0: none)")
    parser.add_argument(
        "--imitation-episodes", type=int, default=4, help="train episodes per scenario a round"
    )
    parser.add_argument(
        "--label-horizon", type=int, default=LABEL_HORIZON, help="steps an imitation label plays out"
    )
    parser.add_argument(
        "--label-every", type=int, default=LABEL_EVERY, help="label one visited state in this many"
    )
    parser.add_argument("--envs-per-scenario", type=int, default=4)
    parser.add_argument("--eval-freq", type=int, default=50_000, help="env steps between validations")
    parser.add_argument("--episodes", type=int, default=2, help="validation episodes per scenario")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(REPO / "specrl" / "policies" / "batch"), help="policy folder")
    return parser.parse_args(argv)


class PolicyController:
    """The model being trained as a controller (deterministic, behind its observation normaliser)."""

    def __init__(self, model: PPO, normalizer: VecNormalize) -> None:
        self.model, self.normalizer = model, normalizer

    def reset(self) -> None:
        pass

    def act(self, observation):
        observed = self.normalizer.normalize_obs(np.asarray(observation, dtype=np.float32)[None])
        action, _ = self.model.predict(observed, deterministic=True)
        return action[0]

    def observe(self, result) -> None:
        pass


class Validation(BaseCallback):
    """Score the policy on validation against the tuned schedule and plain decoding; keep the best
    (model, normaliser) by :meth:`rank` (the module doc)."""

    def __init__(self, envs: dict, schedule: BatchScheduleController, episodes: int, folder: Path) -> None:
        super().__init__()
        self.envs, self.episodes, self.folder = envs, episodes, folder
        self.reference = {name: throughput(env, schedule, episodes) for name, env in envs.items()}
        plain = specrl.StaticController(0)
        self.plain = {name: throughput(envs[name], plain, episodes) for name in FIXED if name in envs}
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
            name: throughput(env, controller, self.episodes) / self.reference[name]
            for name, env in self.envs.items()
        }
        cutoff = cutoff_from({batch_of(name): ratio for name, ratio in self.vs_plain(ratios).items()})
        if cutoff is not None:  # scored as it serves: switched off where it is slower than plain
            switched = BatchCutoffController(controller, cutoff)
            ratios = {
                name: throughput(env, switched, self.episodes) / self.reference[name]
                for name, env in self.envs.items()
            }
        vs_plain = self.vs_plain(ratios)
        score = float(np.exp(np.mean(np.log(list(ratios.values())))))  # geometric mean over scenarios
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
            self.model.save(self.folder / "best_model.zip")
            normalizer.save(str(self.folder / "best_vecnormalize.pkl"))
        return True


def fit_to_labels(
    model: PPO, optimizer, inputs: torch.Tensor, costs: torch.Tensor, taus: list[int], seed: int
):
    """Fit the policy's (k, tau) distribution to minimise its expected regret on ``costs`` (states,
    k, len(taus)) at ``inputs`` (normalised observations), its tau kept to the labelled indices
    ``taus``, with a little entropy left for PPO to explore from; at least ``FIT_UPDATES`` Adam steps."""
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


def imitate(
    model: PPO,
    normalizer: VecNormalize,
    envs: dict,
    schedule,
    rounds: int,
    episodes: int,
    seed: int,
    horizon: int = LABEL_HORIZON,
    every: int = LABEL_EVERY,
) -> list[dict]:
    """DAgger toward one step of policy iteration over the schedule (the module doc's stage 1), in
    place on ``model``.

    One state in ``every`` visited is labelled with the regret of every (k, tau), tau in
    ``IMITATION_TAUS``: how much less than the best action the run gains that takes it and then
    follows the schedule for up to ``horizon`` steps (``batch_sim.RolloutOracle``). Round 0 follows
    the schedule, later rounds the policy. The policy's (k, tau) distribution is fit to minimise
    its expected regret over every label so far, its tau kept to those values, with a little
    entropy left for PPO to explore from. Returns each round's fit: labelled states, the policy's
    mean regret on them, and the least mean regret of one (k, tau) everywhere."""
    tau_grid = next(iter(envs.values())).tau_grid
    taus = [tau_grid.index(tau) for tau in IMITATION_TAUS]
    observations, regrets, fits = [], [], []
    oracles = {
        name: RolloutOracle(env, rates_by_batch(env, schedule, 1, prefill=horizon > 1), schedule, horizon)
        for name, env in envs.items()
    }
    optimizer = torch.optim.Adam(model.policy.parameters(), lr=1e-3)
    for round_ in range(rounds):
        learner, start = PolicyController(model, normalizer), len(regrets)
        behaviour = schedule if round_ == 0 else learner
        for name, env in tqdm(envs.items(), desc=f"imitation round {round_ + 1}/{rounds}", leave=False):
            for episode in range(episodes):
                observation, _ = env.reset(seed=seed + 1000 * round_ + episode)
                done, step = False, 0
                while not done:
                    if step % every == 0:
                        observations.append(observation)
                        regrets.append(oracles[name].regrets(IMITATION_TAUS))
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


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    names = [*FIXED, *SERVING]
    first = load_scenario(names[0])
    pair = first.pair.load()
    latency = scenario_batch_latency(first, pair)
    (REPO / "runs").mkdir(exist_ok=True)  # a folder of its own, even for seeds started in the same second
    stamp = time.strftime("%Y%m%d_%H%M%S")
    run_dir = Path(tempfile.mkdtemp(prefix=f"batch_seed{args.seed}_{stamp}_", dir=REPO / "runs"))

    def make(name: str, index: int):
        return lambda: BatchReplayEnv(name, latency=latency, split="train", pair=pair)

    train = DummyVecEnv([make(name, i) for name in names for i in range(args.envs_per_scenario)])
    train.seed(args.seed)
    hyper = yaml.safe_load(HYPERPARAMETERS.read_text())["ppo"]
    venv = VecNormalize(VecMonitor(train), norm_obs=True, norm_reward=True, gamma=hyper["gamma"])
    model = PPO(
        "MlpPolicy",
        venv,
        seed=args.seed,
        verbose=0,
        tensorboard_log=str(run_dir),
        **{**hyper, "n_steps": 256},
    )

    validation = {
        name: BatchReplayEnv(name, latency=latency, split="validation", pair=pair) for name in names
    }
    _, table = tune_schedule({name: validation[name] for name in FIXED}, args.episodes)
    schedule = BatchScheduleController(table)
    print(f"schedule tuned on validation: {schedule}", flush=True)
    model.set_logger(configure(str(run_dir / "PPO"), ["tensorboard"]))  # imitation and PPO, one log
    callback = Validation(validation, schedule, args.episodes, run_dir)
    callback.init_callback(model)
    if args.imitation_rounds:
        train_envs = {name: BatchReplayEnv(name, latency=latency, split="train", pair=pair) for name in names}
        imitate(
            model,
            venv,
            train_envs,
            schedule,
            args.imitation_rounds,
            args.imitation_episodes,
            args.seed,
            args.label_horizon,
            args.label_every,
        )
        callback.on_step()  # the imitated policy is the first checkpoint
        model.logger.dump(0)
    if args.timesteps:
        model.learn(args.timesteps, callback=EveryNTimesteps(args.eval_freq, callback), progress_bar=True)
    callback.on_step() if not callback.history else None
    best = PPO.load(run_dir / "best_model.zip")
    normalizer = VecNormalize.load(str(run_dir / "best_vecnormalize.pkl"), train)
    export_policy(
        best,
        args.out,
        k_max=first.k_max,
        tau_grid=first.tau_grid,
        obs_normalizer=normalizer,
        scenarios=names,
        pair=pair.name,
        evaluation={"validation_vs_schedule": callback.history, "schedule": schedule.schedule},
        command=command_line(),
    )
    print(
        f"exported {args.out} (best validation ratio vs the schedule {callback.best:.3f}); "
        f"{(time.perf_counter() - started) / 60:.1f} minutes; report it with "
        f"python experiments/batch_sim.py --policy {args.out}"
    )


if __name__ == "__main__":
    main()
