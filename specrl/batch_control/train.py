"""Train a batch-aware PPO policy in the batch simulator and export it.

The policy sees the batch's features as one step and chooses one (k, tau) for every row. It
trains on the train traces of fixed batches and the arrivals load: first by imitation of the
clairvoyant labels (:func:`~specrl.batch_control.imitation.imitate`), then by PPO. Checkpoints
are scored on validation against the batch-size schedule tuned there, under every selection
profile of the latency family, and the best one is exported with its parity checked
(docs/design.md, "Batches"). ``experiments/train_batch.py`` is its command line.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import EveryNTimesteps
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor, VecNormalize

from specrl.batch_control.imitation import LABEL_EVERY, LABEL_HORIZON, Validation, imitate
from specrl.batch_control.schedule import ARRIVALS, FIXED, tune_schedule
from specrl.controllers.batch_schedule import BatchScheduleController
from specrl.envs import load_scenario
from specrl.envs.batch_replay import BatchReplayEnv
from specrl.latency import latency_path
from specrl.training.inputs import MACHINE, read_mapping, training_machines, validated
from specrl.training.options import DEFAULT_CONFIG
from specrl.training.run_folder import export_best, load_best, new_run_dir, run_record, write_run_record


@dataclasses.dataclass
class BatchTrainOptions:
    """One batch training run; the fields are ``experiments/train_batch.py``'s options."""

    timesteps: int = 200_000  # PPO env steps over all envs
    imitation_rounds: int = 4  # DAgger rounds before PPO (0: none)
    imitation_episodes: int = 4  # train episodes per scenario a round
    label_horizon: int = LABEL_HORIZON  # steps an imitation label plays out
    label_every: int = LABEL_EVERY  # label one visited state in this many
    envs_per_scenario: int = 4
    eval_freq: int = 50_000  # env steps between validations
    episodes: int = 2  # validation episodes per scenario
    latency_profiles: list[str] = dataclasses.field(default_factory=lambda: ["family"])
    perturbations: int | None = None
    select_profiles: list[str] | None = None
    seed: int = 0
    out: str | None = None  # the policy folder; default <run folder>/policy
    runs_dir: str = "runs"
    fixed: list[str] = dataclasses.field(default_factory=lambda: list(FIXED))
    arrivals: list[str] = dataclasses.field(default_factory=lambda: list(ARRIVALS))


def train_batch(options: BatchTrainOptions, command: str, say: Callable[[str], None] = print) -> Path:
    """Run ``options``; return the exported policy folder."""
    started = time.perf_counter()
    names = [*options.fixed, *options.arrivals]
    first = load_scenario(names[0])
    pair = first.pair.load()
    latency = first.latency_model(pair)
    run_dir = new_run_dir(options.runs_dir, "batch_mix", "train_batch", options.seed, unique=True)
    config = validated(DEFAULT_CONFIG, read_mapping(DEFAULT_CONFIG))
    hyper = config.ppo.model_dump(exclude_unset=True) | (
        config.batch.model_dump(exclude_unset=True) if config.batch else {}
    )
    budget = {k: getattr(options, k) for k in ("timesteps", "imitation_rounds", "eval_freq")}
    record = run_record(
        command=command,
        seed=options.seed,
        arguments=dataclasses.asdict(options),
        hyperparameters=hyper,
        budget=budget,
        scenarios=[load_scenario(name) for name in names],
        pair=pair.name,
        latency_file=latency_path(pair, "batch"),
    )
    write_run_record(run_dir, record)

    machines = training_machines(
        options.latency_profiles,
        latency,
        options.perturbations,
        batch=True,
        select=options.select_profiles,
    )
    say(machines.line())

    def env(name: str, split: str, priced_by=machines.family or latency) -> BatchReplayEnv:
        return BatchReplayEnv(name, latency=priced_by, split=split, pair=pair, prepare=True)

    train = DummyVecEnv(
        [lambda name=name: env(name, "train") for name in names for _ in range(options.envs_per_scenario)]
    )
    train.seed(options.seed)
    venv = VecNormalize(VecMonitor(train), norm_obs=True, norm_reward=True, gamma=hyper["gamma"])
    model = PPO("MlpPolicy", venv, seed=options.seed, verbose=0, tensorboard_log=str(run_dir), **hyper)

    # The schedule of every machine the episodes are priced by, tuned on its validation traces;
    # checkpoints are scored under the machines of machines.select (entries <scenario>@<profile>).
    family = machines.family
    profiles = {MACHINE: latency} if family is None else {name: family.profile(name) for name in family.names}
    schedules, validation, against = {}, {}, {}
    for profile, priced_by in profiles.items():
        envs = {
            name: env(name, "validation", priced_by)
            for name in names
            if name in options.fixed or profile in machines.select
        }
        _, table = tune_schedule({name: envs[name] for name in options.fixed}, options.episodes)
        schedules[profile] = BatchScheduleController(table)
        say(f"schedule tuned on validation under {profile}: {schedules[profile]}")
        if profile in machines.select:
            for name, validation_env in envs.items():
                entry = name if family is None else f"{name}@{profile}"
                validation[entry], against[entry] = validation_env, schedules[profile]
    model.set_logger(configure(str(run_dir / "PPO"), ["tensorboard"]))  # imitation and PPO, one log
    callback = Validation(validation, against, options.episodes, run_dir, cutoff=family is None)
    callback.init_callback(model)
    if options.imitation_rounds:
        train_envs = {name: env(name, "train") for name in names}
        imitate(
            model,
            venv,
            train_envs,
            schedules,
            options.imitation_rounds,
            options.imitation_episodes,
            options.seed,
            options.label_horizon,
            options.label_every,
        )
        callback.on_step()  # the imitated policy is the first checkpoint
        model.logger.dump(0)
    if options.timesteps:
        model.learn(
            options.timesteps, callback=EveryNTimesteps(options.eval_freq, callback), progress_bar=True
        )
    if not callback.history:
        callback.on_step()
    best, normalizer = load_best(run_dir, train)
    out = Path(options.out) if options.out else run_dir / "policy"
    export_best(
        run_dir,
        best,
        normalizer,
        out,
        k_max=first.k_max,
        tau_grid=first.tau_grid,
        scenarios=names,
        pair=pair.name,
        evaluation={
            "validation_vs_schedule": callback.history,
            "schedule": {profile: schedule.schedule for profile, schedule in schedules.items()},
            "run_dir": str(run_dir),
        },
        latency_profiles=machines.describe(),
        command=command,
    )  # the export checks parity with the model; run.json is its provenance
    minutes = (time.perf_counter() - started) / 60
    say(
        f"exported {out} (best validation ratio vs the schedule {callback.best:.3f}); run folder "
        f"{run_dir}; {minutes:.1f} minutes; report it with python experiments/batch_real.py --policy {out}"
    )
    return out
