"""Train a batch-aware PPO policy in the batch simulator and export it (a first cut of issue 12's
policy; ``train_ppo.py`` remains the main job for single-sequence control).

The policy sees the features of the batch as one step (``batch_size`` among them) and chooses one
(k, tau) for every row. It trains on the **train** traces of a mix of fixed batches (``batch_1``,
``batch_4``, ``batch_16``, ``batch_64``) and the ``serving`` load, one scenario per env; every
``--eval-freq`` steps the deterministic policy is scored on the **validation** traces against the
batch-size schedule tuned there (``experiments/batch_sim.py``'s tuning), and the best checkpoint
is exported. Report on test with ``python experiments/batch_sim.py --policy specrl/policies/batch``.

    python experiments/train_batch.py                         # specrl/policies/batch, ~10 minutes
    python experiments/train_batch.py --timesteps 20000 --out /tmp/batch_policy   # a smoke run
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback, EveryNTimesteps
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor, VecNormalize

sys.path.insert(0, str(Path(__file__).resolve().parent))
from batch_sim import FIXED, SERVING, throughput, tune_schedule  # noqa: E402

from specrl.controllers.batch_schedule import BatchScheduleController  # noqa: E402
from specrl.envs import load_scenario  # noqa: E402
from specrl.envs.batch_replay import BatchReplayEnv  # noqa: E402
from specrl.evaluation.machine import command_line  # noqa: E402
from specrl.export import export_policy  # noqa: E402
from specrl.latency.batch import batch_calibrated  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
HYPERPARAMETERS = REPO / "specrl" / "policies" / "ppo.yaml"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--timesteps", type=int, default=600_000, help="env steps over all envs")
    parser.add_argument("--envs-per-scenario", type=int, default=4)
    parser.add_argument("--eval-freq", type=int, default=100_000, help="env steps between validations")
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
    """Score the policy on validation against the tuned schedule; keep the best (model, normaliser)."""

    def __init__(self, envs: dict, schedule: BatchScheduleController, episodes: int, folder: Path) -> None:
        super().__init__()
        self.envs, self.episodes, self.folder = envs, episodes, folder
        self.reference = {name: throughput(env, schedule, episodes) for name, env in envs.items()}
        self.best, self.history = -np.inf, []

    def _on_step(self) -> bool:
        normalizer = self.model.get_env()
        controller = PolicyController(self.model, normalizer)
        ratios = {
            name: throughput(env, controller, self.episodes) / self.reference[name]
            for name, env in self.envs.items()
        }
        score = float(np.exp(np.mean(np.log(list(ratios.values())))))  # geometric mean over scenarios
        for name, ratio in ratios.items():
            self.logger.record(f"specdec/batch/ratio_vs_schedule/{name}", ratio)
        self.logger.record("specdec/batch/ratio_vs_schedule", score)
        self.history.append({"timesteps": self.num_timesteps, "score": score, "ratios": ratios})
        print(f"{self.num_timesteps} steps: validation vs schedule {score:.3f} {ratios}", flush=True)
        if score > self.best:
            self.best = score
            self.model.save(self.folder / "best_model.zip")
            normalizer.save(str(self.folder / "best_vecnormalize.pkl"))
        return True


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    started = time.perf_counter()
    names = [*FIXED, *SERVING]
    first = load_scenario(names[0])
    pair = first.pair.load()
    latency = batch_calibrated(pair, k_max=first.k_max)
    run_dir = REPO / "runs" / f"batch_{time.strftime('%Y%m%d_%H%M%S')}"
    run_dir.mkdir(parents=True, exist_ok=True)

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
    callback = Validation(validation, schedule, args.episodes, run_dir)
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
