"""One PPO training run on its :class:`~specrl.training.inputs.RunInputs`, to the best checkpoint
(``specrl train``'s step 2).

:meth:`PPORun.open` makes the run folder (or reopens one to resume), the envs and the model;
:meth:`PPORun.train` trains with checkpoint selection on validation traces and leaves the best
checkpoint in the folder, which :meth:`PPORun.best` loads.
"""

from __future__ import annotations

import copy
import signal
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from stable_baselines3 import PPO
from stable_baselines3.common.logger import configure
from stable_baselines3.common.running_mean_std import RunningMeanStd
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize

from specrl.acceptance import AcceptancePredictor
from specrl.features import FEATURE_NAMES
from specrl.latency import LatencyModel, latency_path
from specrl.rule_tuning import fit_acceptance_predictor
from specrl.traces import TraceSet
from specrl.training.callbacks import (
    KLToClone,
    Progress,
    SpecdecMetrics,
    ValidationEvaluation,
    every,
    log_hparams,
)
from specrl.training.comparison import Comparison
from specrl.training.inputs import MACHINE, RunInputs
from specrl.training.mix import training_envs
from specrl.training.run_folder import (
    CHECKPOINT,
    NORMALIZER,
    PREDICTOR,
    export_best,
    load_best,
    load_clone,
    new_run_dir,
    resumed_state,
    run_record,
    save_best,
    save_checkpoint,
    save_clone,
    write_run_record,
)
from specrl.training.selection import PolicyVsRules, Predict, policy_predict
from specrl.training.warm_start import warm_start


def interrupt_on_signals() -> None:
    """Ctrl-C (SIGINT) and SIGTERM raise KeyboardInterrupt, which saves a checkpoint. Set
    explicitly: a process started in the background by a script inherits SIGINT ignored, and a
    scheduler stops jobs with SIGTERM."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


def run_predictor(run_dir: Path, train_traces: Iterable[TraceSet]) -> AcceptancePredictor:
    """The run's acceptance predictor (the per-token stop dimension applies it): read back when
    resuming, else fitted on the train traces and saved in the run folder."""
    path = run_dir / PREDICTOR
    if path.is_file():
        return AcceptancePredictor.load(path)
    predictor = fit_acceptance_predictor(train_traces)
    predictor.save(path)
    return predictor


MACHINE_FEATURES = np.arange(FEATURE_NAMES.index("draft_price"), len(FEATURE_NAMES))


class MachineStatistics(RunningMeanStd):
    """Observation statistics whose machine features (:data:`MACHINE_FEATURES`: the prices, the
    verification's curve, priced_k) stay at mean 0.5 and standard deviation 0.25: a run sees a few
    machines, so learned statistics would put a held-out machine far outside them."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__(shape=shape)
        self._pin()

    def _pin(self) -> None:
        self.mean[MACHINE_FEATURES] = 0.5
        self.var[MACHINE_FEATURES] = 0.25**2

    def update(self, arr: np.ndarray) -> None:
        super().update(arr)
        self._pin()


class PPORun:
    """A PPO run in its run folder (:mod:`specrl.training.run_folder`): the envs, the model, and
    checkpoint selection by the deterministic policy against TCP on validation traces.

    Attributes:
        inputs: what it trains on (:class:`RunInputs`).
        run_dir: the run folder; ``state``: its step count and best validation ratio so far.
        budget: the resolved ``train`` of the config.
        predictor: the acceptance predictor of the stop dimension (None without it).
        envs: the training VecEnv; ``venv``: the same behind VecMonitor and VecNormalize.
        model: the PPO model being trained.
        selection: the policy against TCP on the validation traces (TCP scored once).
        footings: the comparisons selection scores under, by profile; ``footing``: the test
            report's, on this machine.
    """

    def __init__(
        self,
        inputs: RunInputs,
        run_dir: Path,
        state: dict[str, Any],
        *,
        hyperparameters: dict[str, Any],
        budget: dict[str, Any],
        seed: int,
        device: str,
        real_loop: bool,
        subprocesses: bool,
        sim_repeats: int,
        resumed: bool,
        warm_start: bool = True,
    ) -> None:
        self.inputs, self.run_dir, self.state, self.budget = inputs, run_dir, state, budget
        self.seed, self.warm, self.device, self.resumed = seed, warm_start, device, resumed
        self.predictor = (
            None if inputs.space.stop_grid is None else run_predictor(run_dir, inputs.train.values())
        )
        self.envs = training_envs(
            inputs.scenarios,
            budget["n_envs"],
            inputs.machines.family or inputs.latency,
            train=None if real_loop else inputs.train,
            predictor=self.predictor,
            seed=seed,
            subprocesses=subprocesses,
        )
        # SB3's episode scalars: rollout/ep_rew_mean and rollout/ep_len_mean
        monitored = VecMonitor(self.envs)
        self.normalize = bool(budget.get("normalize_observations", False))
        if resumed:
            self.venv = VecNormalize.load(str(run_dir / NORMALIZER), monitored)
            self.model = PPO.load(run_dir / CHECKPOINT, env=self.venv, device=device)
        else:
            # Rewards are normalised: scenarios differ in scale. Observations lie in [0, 1] already;
            # normalising them too is an option of the YAML (the statistics are baked into the export).
            self.venv = VecNormalize(
                monitored, norm_obs=self.normalize, norm_reward=True, gamma=hyperparameters["gamma"]
            )
            self.venv.obs_rms = MachineStatistics(self.venv.observation_space.shape)
            self.model = PPO("MlpPolicy", self.venv, seed=seed, device=device, verbose=0, **hyperparameters)
        rule_predictor = self.predictor or fit_acceptance_predictor(inputs.train.values())

        def footing(latency: LatencyModel) -> Comparison:
            return Comparison(
                inputs.pair,
                latency,
                repeats=sim_repeats,
                tau_grid=inputs.space.tau_grid,
                predictor=self.predictor,
                rule_predictor=rule_predictor,
            )

        self.footings = {name: footing(latency) for name, latency in inputs.machines.select.items()}
        # the test report's: this machine (the same object, its rules tuned once, when it is the
        # one footing selection scores under)
        self.footing = self.footings.get(MACHINE) or footing(inputs.latency)
        self.selection = PolicyVsRules(self.footings, inputs.selected_on, inputs.validation)

    @classmethod
    def open(
        cls,
        inputs: RunInputs,
        *,
        resume: str | Path | None,
        runs_dir: str | Path,
        experiment: str,
        command: str,
        arguments: dict[str, Any],
        hyperparameters: dict[str, Any],
        budget: dict[str, Any],
        seed: int,
        **options: Any,
    ) -> PPORun:
        """The run saved in ``resume``, or a new one in ``runs_dir``
        (``<scenario or "mix">__<experiment>__<seed>__<time>``, with ``run.json`` and ``config.yaml``
        recording ``command``, its parsed ``arguments`` and the resolved config). ``options``: the
        keyword arguments of the constructor after ``seed``."""
        if resume is not None:
            run_dir = Path(resume)
            state = resumed_state(run_dir)
        else:
            scenarios = inputs.scenarios
            label = scenarios[0].name if len(scenarios) == 1 else "mix"
            run_dir = new_run_dir(runs_dir, label, experiment, seed)
            record = run_record(
                command=command,
                seed=seed,
                arguments=arguments,
                hyperparameters=hyperparameters,
                budget=budget,
                scenarios=scenarios,
                pair=inputs.pair.name,
                latency_file=latency_path(inputs.pair),
            )
            write_run_record(run_dir, record)
            state = {"timesteps": 0, "command": command}
        return cls(
            inputs,
            run_dir,
            state,
            hyperparameters=hyperparameters,
            budget=budget,
            seed=seed,
            resumed=resume is not None,
            **options,
        )

    @property
    def remaining(self) -> int:
        """Env steps left of the budget."""
        return self.budget["total_timesteps"] - self.state["timesteps"]

    def save_checkpoint(self) -> None:
        """The model, its statistics and the step count, to resume from (``--resume``)."""
        save_checkpoint(self.run_dir, self.model, self.venv, self.state)

    def evaluate(self) -> dict[str, Any]:
        """The current policy against the rules on the validation traces (:class:`PolicyVsRules`)."""
        return self.selection(policy_predict(self.model, self.venv if self.normalize else None))

    def warm_start(self) -> dict[str, Any]:
        """Clone the rules into the policy (:func:`~specrl.training.warm_start.warm_start`); what was
        cloned is recorded in ``state["warm_start"]`` and returned. The priced rule demonstrates
        under the whole training family with the YAML's ``train.demonstrations: family``, else
        under the profiles selected under."""
        over_family = self.budget.get("demonstrations") == "family"
        self.state["warm_start"] = warm_start(
            self.model,
            self.venv if self.normalize else None,
            self.inputs,
            self.footings,
            self.predictor,
            self.envs.observation_space.shape[0],
            self.seed,
            {name: (rules, self.selection.bars[name]) for name, rules in self.selection.rules.items()},
            family=self.inputs.machines.family if over_family else None,
        )
        return self.state["warm_start"]

    def clone(self) -> Any:
        """The warm start's policy, frozen, which ``kl_to_clone`` keeps PPO near: saved in the run
        folder when the run starts, loaded from it when it resumes."""
        if not self.warm:
            raise ValueError(
                "kl_to_clone keeps PPO near the warm start's clone: drop --no-warm-start, or set "
                "kl_to_clone to 0 in the config"
            )
        clone = copy.deepcopy(self.model.policy)
        if self.resumed:
            load_clone(self.run_dir, clone)
        else:
            save_clone(self.run_dir, clone)
        clone.requires_grad_(False)
        return clone

    def train(self, settings: dict[str, Any]) -> bool:
        """Train the rest of the budget, logging to the run folder (SB3's CSV and TensorBoard,
        ``specdec/`` scalars, ``settings`` in the HParams tab), evaluating every
        ``eval_freq`` steps and checkpointing every ``checkpoint_freq``; then the final model
        competes with the best checkpoint. False if interrupted (Ctrl-C, SIGTERM: see
        :func:`interrupt_on_signals`), with a checkpoint saved to resume from."""
        space = self.inputs.space
        selection = ValidationEvaluation(
            self.evaluate, lambda: save_best(self.run_dir, self.model, self.venv), self.state
        )
        callbacks = [
            SpecdecMetrics(space.tau_grid, stop_grid=space.stop_grid, drafters=space.drafters),
            every(self.budget["eval_freq"], selection),
            every(self.budget["checkpoint_freq"], self.save_checkpoint),
            Progress(self.budget["total_timesteps"], self.state["timesteps"]),
        ]
        self.model.set_logger(configure(str(self.run_dir), ["csv", "tensorboard"]))
        log_hparams(self.model.logger, settings)  # written by the first dump, selection's or PPO's
        try:
            if not self.resumed:  # the start, warm or not, is the first candidate
                if self.warm:
                    self.warm_start()
                selection.init_callback(self.model)
                selection.run()
                self.save_checkpoint()
            if self.budget.get("kl_to_clone"):
                callbacks.append(KLToClone(self.clone(), self.budget["kl_to_clone"]))
            if self.remaining > 0:
                self.model.learn(
                    total_timesteps=self.remaining, callback=callbacks, reset_num_timesteps=not self.resumed
                )
        except KeyboardInterrupt:
            self.save_checkpoint()
            self.close()
            return False
        self.save_checkpoint()
        selection.init_callback(self.model)
        selection.run()  # the final model competes with the best checkpoint
        return True

    def best(self) -> tuple[PPO, VecNormalize | None, Predict]:
        """The best checkpoint, its observation statistics (None when not normalised) and its
        deterministic policy through them."""
        model, normalizer = load_best(self.run_dir, self.envs, normalize=self.normalize, device=self.device)
        return model, normalizer, policy_predict(model, normalizer)

    def export(
        self,
        folder: Path,
        model: PPO,
        normalizer: VecNormalize | None,
        results: dict[str, Any],
        *,
        scenarios: list[str],
        command: str,
    ) -> Path:
        """The best checkpoint (:meth:`best`) exported to ``folder`` (:func:`export_best`) with the
        run's action space, the training ``scenarios`` as given, and as its ``evaluation`` the test
        ``results``, the validation scores it was selected by and the steps trained."""
        space = self.inputs.space
        evaluation = {
            "protocol": "trained on train traces, checkpoint selected on validation traces, reported on test",
            **results,
            "ratio_vs_tcp_sim_validation": self.state["best"]["ratio_vs_tcp"],
            "selected_on_validation": self.state["best"],
            "beats_best_rule_on_validation": self.state["best"]["worst_ratio_vs_best_rule"] >= 1.0,
            "warm_start": self.state.get("warm_start"),
            "training_steps": self.model.num_timesteps,
            "run_dir": str(self.run_dir),
        }
        return export_best(
            self.run_dir,
            model,
            normalizer,
            folder,
            k_max=space.k_max,
            tau_grid=space.tau_grid,
            stop_grid=space.stop_grid,
            predictor=self.predictor,
            drafters=space.drafters,
            scenarios=scenarios,
            pair=self.inputs.pair.name,
            evaluation=evaluation,
            latency_profiles=self.inputs.machines.describe(),
            command=command,
        )

    def close(self) -> None:
        """Flush and close the run's logs."""
        self.model.logger.close()
