"""One PPO run from start to report: :func:`train`, what ``specrl train`` calls. Its four steps:
the inputs (pair, latency, traces); the run (training, checkpoints selected on validation
traces); the comparison on test traces in the simulator (reported, never selected on); the export
into ``<run>/policy`` (and ``--export-as``) and the paired check in the real loop (docs/design.md
section 4b: train on train, select on validation, report on test once).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from specrl.controllers.learned import LearnedController
from specrl.envs import embedded_scenarios
from specrl.evaluation.real_loop_check import check_scenarios, real_loop_section
from specrl.export.layout import SHIPPED_POLICY_DIR, PolicyError
from specrl.export.write import PARITY_OBSERVATIONS, check_replaceable, copy_policy
from specrl.home import user_policies_dir
from specrl.io import write_text_atomic
from specrl.provenance import machine_clause
from specrl.training.comparison import simulator_section, stored_results, unseen_note
from specrl.training.inputs import (
    ActionSpaceError,
    RunInputs,
    check_latency_profiles,
    load_scenarios,
    resolve_config,
)
from specrl.training.options import DEFAULT_SELECT_SCENARIOS, OptionError, TrainOptions
from specrl.training.ppo_run import PPORun
from specrl.training.selection import selection_section

#: The exported policy's folder inside its run folder.
POLICY_SUBDIR = "policy"


@dataclass(frozen=True)
class TrainResult:
    """Where a run left its work: the run folder, the exported policy (None when interrupted), the
    copy under ``--export-as`` (if asked), and the report (``results.md``'s text)."""

    run_dir: Path
    policy: Path | None
    exported_as: Path | None
    report: str


def export_target(name: str) -> Path:
    """The folder ``--export-as NAME`` writes: ``$SPECRL_HOME/policies/NAME``, or NAME itself when
    it is a path (it holds a separator).

    Raises:
        OptionError: the path is a shipped policy's folder (training never replaces one), or a
            folder that is not a policy folder (:func:`~specrl.export.write.check_replaceable`).
    """
    target = Path(name).expanduser() if "/" in name or "\\" in name else user_policies_dir() / name
    if target.resolve().parent == SHIPPED_POLICY_DIR.resolve():
        raise OptionError(
            f"--export-as {name}: that is a shipped policy's folder, which training never replaces; "
            "give a name (saved under $SPECRL_HOME/policies) or another folder"
        )
    try:
        check_replaceable(target)
    except PolicyError as error:
        raise OptionError(f"--export-as {name}: {error}") from None
    return target


def train(options: TrainOptions, command: str, progress: bool = True) -> TrainResult:
    """Train, select, export and report one PPO run (the module docstring's four steps).

    Args:
        options: what to run; checked first (:meth:`TrainOptions.check`).
        command: the command line, recorded in the run folder and the policy's metadata.
        progress: print the steps as they go (the command's output).

    Raises:
        OptionError: options that cannot run, or a configuration or scenario that does not fit
            (the message names the fix).
    """
    options.check()
    check_latency_profiles(options.latency_profiles, options.perturbations, options.select_profiles)
    options = options.with_scenario_defaults(embedded_scenarios())
    export_as = export_target(options.export_as) if options.export_as else None  # refused before training
    say = print if progress else (lambda *_: None)
    started = time.perf_counter()
    real_loop = options.train_on == "real"
    budget_flags = ("total_timesteps", "n_envs", "eval_freq", "kl_to_clone")  # the YAML's unless given
    overrides = {key: getattr(options, key) for key in budget_flags}
    hyper, budget = resolve_config(
        options.config, real_loop=real_loop, overrides=overrides, hyperparameters=options.hyperparameters
    )
    torch.manual_seed(options.seed)

    # 1. The pair, its latency on this machine, the traces.
    scenarios = load_scenarios(options.scenarios, options.preset)
    try:
        selected = load_scenarios(options.select_scenarios, options.preset)
        inputs = RunInputs.load(
            scenarios,
            stop=options.stop,
            select=selected,
            profiles=options.latency_profiles,
            perturbations=options.perturbations,
            select_profiles=options.select_profiles,
        )
    except ActionSpaceError as error:
        hint = ""
        if options.select_scenarios == list(DEFAULT_SELECT_SCENARIOS):
            hint = (
                f"; --select-scenarios defaults to {' '.join(DEFAULT_SELECT_SCENARIOS)}: give scenarios of "
                "the training ones' action space (for mixed_pool: --select-scenarios code_pool prose_pool "
                "math_pool)"
            )
        raise OptionError(f"{error}{hint}") from None
    say(inputs.describe())

    # 2. The run folder, the envs, the model (new or resumed); training, selecting on validation.
    run = PPORun.open(
        inputs,
        resume=options.resume,
        runs_dir=options.runs_dir,
        experiment=options.exp_name,
        command=command,
        arguments=dataclasses.asdict(options),
        hyperparameters=hyper,
        budget=budget,
        seed=options.seed,
        device=options.device,
        real_loop=real_loop,
        subprocesses=options.subproc,
        sim_repeats=options.sim_repeats,
        warm_start=options.warm_start,
    )
    where = "real-loop envs" + " in processes" * options.subproc if real_loop else "replayed episodes"
    say(f"run folder {run.run_dir}; training {run.remaining} env steps on {run.envs.num_envs} {where}")
    pair, latency = inputs.pair, inputs.latency
    settings = {**budget, **hyper, "scenarios": options.scenarios, "pair": pair.name, "seed": options.seed}
    settings["latency_profiles"] = options.latency_profiles
    if not run.train(settings | {"latency_device": latency.device, "command": command}):
        message = (
            f"interrupted at {run.model.num_timesteps} steps; checkpoint saved. Continue with:\n"
            f"  specrl train --resume {run.run_dir}"
        )
        say("\n" + message)
        return TrainResult(run.run_dir, None, None, message)
    best, normalizer, predict = run.best()
    kept = run.state["best"]
    chosen = selection_section(run.selection, kept, run.state.get("warm_start"))
    say("\n" + chosen)

    # 3. The comparison on test traces (simulator, modeled time): reported, never selected on.
    comparison = run.footing
    trained = [s.name for s in scenarios]
    compared = scenarios + [
        s for s in load_scenarios(options.eval_scenarios, options.preset) if s.name not in trained
    ]
    rows = {s.name: comparison.in_simulator(s, predict) for s in compared}

    # 4. Export into the run folder (and where --export-as says), then validate in the real loop.
    folder = run.run_dir / POLICY_SUBDIR
    results = stored_results(rows, trained)
    run.export(folder, best, normalizer, results, scenarios=list(options.scenarios), command=command)
    say(f"\nexported {folder} (parity with the SB3 policy checked on {PARITY_OBSERVATIONS:,} observations)")
    real_rows = {}
    if options.validate_scenarios:
        real_rows = check_scenarios(
            options.validate_scenarios,
            comparison,
            rows,
            LearnedController.load(folder),
            preset=options.preset,
            prompts=options.validate_prompts,
            repeats=options.validate_repeats,
            seed=options.seed,
        )
    minutes = (time.perf_counter() - started) / 60
    text = (
        chosen
        + simulator_section(rows, kept["ratio_vs_tcp"], unseen_note(compared, pair))
        + (
            real_loop_section(real_rows, options.validate_prompts, options.validate_repeats)
            if real_rows
            else ""
        )
        + f"\nCommand: `{command}` ({minutes:.1f} minutes{' since the resume' if options.resume else ''}). "
        f"Machine: {machine_clause(latency.device)}.\n"
    )
    write_text_atomic(run.run_dir / "results.md", text)
    write_text_atomic(folder / "results.md", text)
    if export_as is not None:
        copy_policy(folder, export_as)
        say(f"exported as {export_as} (LearnedController.load({options.export_as!r}))")
    run.close()
    say("\n" + text)
    return TrainResult(run.run_dir, folder, export_as, text)
