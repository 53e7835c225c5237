"""Train a PPO policy that picks (k, tau) for every speculative iteration, and export it.

With no arguments, on the embedded default pair:

1. makes sure the pair exists (builds it with progress if not), calibrates the latency model
   of this machine (cached) and loads or records the acceptance traces (shipped for the
   default pair, else collected and cached);
2. trains PPO (stable-baselines3) on the vectorised trace-replay simulator over a mix of
   scenarios (greedy and temperature 1; code/prose/math mixed, code->math, C headers, Perl)
   on their train traces, each episode priced by a machine drawn from the latency family
   (measured CPUs and GPU-like profiles, perturbed; never this machine's calibration or the
   held-out GPU-like profile: specrl.latency.family), evaluating on their validation traces
   under two of the family's profiles every --eval-freq steps and keeping the checkpoint with
   the best worst ratio to the rules (checkpoint selection sees validation only);
3. exports the best policy to specrl/policies/<name>/ (a torch.export program + metadata, parity-checked);
4. prints the comparison on test traces in the simulator under this machine's calibration, a
   machine the policy never trained on (PPO vs TCP vs best static in hindsight vs the HF
   heuristic vs the clairvoyant oracle, the rules tuned on validation here), the unseen
   license domain included, then validates in the real loop (wall clock, test prompts,
   medians over repeats).

Protocol (docs/design.md section 4b): train on train, select on validation, report on test once.

TensorBoard: ``tensorboard --logdir runs`` (scalars under specdec/, SB3's under train/ and
rollout/, hyperparameters under TEXT, histograms of k and tau). Ctrl-C (or SIGTERM) saves a checkpoint;
``--resume runs/<run>`` continues it.

    python experiments/train_ppo.py                                   # the default run
    python experiments/train_ppo.py --total-timesteps 2000000 --policy-name long
    python experiments/train_ppo.py --preset tiny --total-timesteps 4096 --validate-prompts 1  # smoke
    python experiments/train_ppo.py --latency-profiles machine  # this machine's prices only
    python experiments/train_ppo.py --latency-profiles gpu-like-h200 --perturbations 0  # one profile
    python experiments/train_ppo.py --train-on real --subproc --n-envs 2 --scenarios code \
        --latency-profiles machine  # the real loop
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import torch

from specrl.controllers.learned import LearnedController
from specrl.evaluation.machine import machine_clause
from specrl.evaluation.real_loop_check import check_scenarios, real_loop_section
from specrl.export.layout import SHIPPED_POLICY_DIR
from specrl.export.write import PARITY_OBSERVATIONS
from specrl.io import write_text_atomic
from specrl.training.comparison import simulator_section, stored_results, unseen_note
from specrl.training.inputs import (
    DEFAULT_EVAL_SCENARIOS,
    DEFAULT_SCENARIOS,
    MACHINE,
    REAL_ENVS,
    ActionSpaceError,
    RunInputs,
    add_latency_profile_arguments,
    check_latency_profile_arguments,
    load_scenarios,
    resolve_config,
)
from specrl.training.ppo_run import PPORun, interrupt_on_signals
from specrl.training.selection import selection_section

SELECT_DEFAULT = ["code", "prose", "math", "code_t1", "prose_t1", "math_t1"]  # --select-scenarios


def parse_args() -> argparse.Namespace:
    """The command line (every flag documented by ``--help``)."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=DEFAULT_SCENARIOS,
        help="training scenarios (shipped names or YAML paths); envs are split as evenly as possible",
    )
    parser.add_argument(
        "--preset", default=None, help="embedded pair to use instead of the scenarios' (small, tiny)"
    )
    parser.add_argument("--config", default=str(SHIPPED_POLICY_DIR / "ppo.yaml"), help="hyperparameter YAML")
    parser.add_argument(
        "--total-timesteps",
        type=int,
        default=None,
        help="PPO env steps (default: the YAML's; 0: export the warm start, the rules cloned, untouched)",
    )
    parser.add_argument(
        "--n-envs",
        type=int,
        default=None,
        help=f"parallel replayed episodes (default: the YAML's; with --train-on real, {REAL_ENVS} at most)",
    )
    parser.add_argument(
        "--eval-freq", type=int, default=None, help="env steps between evaluations on validation traces"
    )
    parser.add_argument(
        "--kl-to-clone",
        type=float,
        default=None,
        help="penalty on each step's (normalised) reward per nat of KL divergence from the warm "
        "start's clone (default: the YAML's kl_to_clone, or 0: none)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of PPO and of the simulators")
    parser.add_argument("--device", default="cpu", help="device of the PPO networks (the MLP is tiny: cpu)")
    parser.add_argument("--exp-name", default="ppo", help="experiment name in the run folder's name")
    parser.add_argument("--runs-dir", default="runs", help="folder of TensorBoard runs and checkpoints")
    parser.add_argument("--policy-name", default="default", help="export to <policies-dir>/<name>/")
    parser.add_argument(
        "--policies-dir",
        default=str(SHIPPED_POLICY_DIR),
        help="folder of exported policies (default: the shipped ones, specrl/policies, which "
        'LearnedController.load("<name>") reads)',
    )
    parser.add_argument("--resume", default=None, metavar="RUN_DIR", help="continue the run saved in RUN_DIR")
    parser.add_argument(
        "--eval-scenarios",
        nargs="*",
        default=DEFAULT_EVAL_SCENARIOS,
        help="scenarios added to the final comparison on test traces (the training ones are always in it)",
    )
    parser.add_argument(
        "--select-scenarios",
        nargs="*",
        default=SELECT_DEFAULT,
        help="scenarios checkpoint selection also scores on, on their validation traces (the training "
        "ones always); the kept checkpoint has the highest worst ratio to the best rule over them all",
    )
    parser.add_argument(
        "--validate-scenarios",
        nargs="*",
        default=["code", "prose", "math", "prose_t1"],
        help="scenarios validated in the real loop (wall clock); none to skip",
    )
    parser.add_argument(
        "--validate-prompts", type=int, default=2, help="test prompts per domain of a validated scenario"
    )
    parser.add_argument("--validate-repeats", type=int, default=2, help="repeats (the median is reported)")
    parser.add_argument(
        "--sim-repeats", type=int, default=4, help="acceptance draws per trace for sampled scenarios"
    )
    parser.add_argument(
        "--no-stop",
        action="store_true",
        help="train without the per-token stop dimension (actions [k, tau_index] only)",
    )
    parser.add_argument(
        "--warm-start",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="start PPO from a clone of each training scenario's best rule on validation (default); "
        "--no-warm-start trains from a random policy",
    )
    parser.add_argument(
        "--train-on",
        choices=("replay", "real"),
        default="replay",
        help="replay: the trace-replay simulator (default, ~1e5 steps/s); real: the real loop on train "
        "prompts, with each scenario's time source (slow: tens of steps/s per env)",
    )
    add_latency_profile_arguments(parser)
    parser.add_argument(
        "--subproc",
        action="store_true",
        help="with --train-on real: each env in its own process (SB3's SubprocVecEnv; each loads the pair)",
    )
    args = parser.parse_args()
    check_latency_profile_arguments(parser, args)
    if args.train_on == "real" and args.latency_profiles != [MACHINE]:
        parser.error(f"--train-on real measures this machine's time: give --latency-profiles {MACHINE}")
    if args.subproc and args.train_on != "real":
        parser.error("--subproc runs real-loop envs in processes: give it with --train-on real")
    if args.total_timesteps is not None and args.total_timesteps < 0:
        parser.error(f"--total-timesteps must be >= 0 (0: the warm start alone), got {args.total_timesteps}")
    if args.kl_to_clone is not None and args.kl_to_clone < 0:
        parser.error(f"--kl-to-clone must be >= 0 (0: no penalty), got {args.kl_to_clone}")
    if args.kl_to_clone and not args.warm_start:
        parser.error("--kl-to-clone keeps PPO near the warm start's clone: drop --no-warm-start")
    if args.total_timesteps == 0 and not args.warm_start:
        parser.error("--total-timesteps 0 with --no-warm-start would export an untrained policy")
    for flag in (
        "n_envs",
        "eval_freq",
        "validate_prompts",
        "validate_repeats",
        "sim_repeats",
    ):
        value = getattr(args, flag)
        if value is not None and value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be a positive integer, got {value}")
    if args.resume and not (Path(args.resume) / "state.json").is_file():
        parser.error(
            f"--resume {args.resume}: no state.json there; give a run folder written by this script "
            "(runs/<scenario>__<exp>__<seed>__<time>)"
        )
    return args


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    interrupt_on_signals()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    real_loop = args.train_on == "real"
    overrides = {key: getattr(args, key) for key in ("total_timesteps", "n_envs", "eval_freq", "kl_to_clone")}
    try:
        hyper, budget = resolve_config(args.config, real_loop=real_loop, overrides=overrides)
    except ValueError as error:
        raise SystemExit(str(error)) from None
    torch.manual_seed(args.seed)

    # 1. The pair, its latency on this machine, the traces.
    scenarios = load_scenarios(args.scenarios, args.preset)
    try:
        selected = load_scenarios(args.select_scenarios, args.preset)
        inputs = RunInputs.load(
            scenarios,
            stop=not args.no_stop,
            select=selected,
            profiles=args.latency_profiles,
            perturbations=args.perturbations,
            select_profiles=args.select_profiles,
        )
    except ActionSpaceError as error:
        hint = ""
        if args.select_scenarios == SELECT_DEFAULT:
            hint = (
                f"; --select-scenarios defaults to {' '.join(SELECT_DEFAULT)}: give scenarios of the "
                "training ones' action space "
                "(for mixed_pool: --select-scenarios code_pool prose_pool math_pool)"
            )
        raise SystemExit(f"{error}{hint}") from None
    except ValueError as error:
        raise SystemExit(str(error)) from None
    print(inputs.describe())

    # 2. The run folder, the envs, the model (new or resumed); training, selecting on validation.
    run = PPORun.open(
        inputs,
        resume=args.resume,
        runs_dir=args.runs_dir,
        experiment=args.exp_name,
        command=command,
        arguments=vars(args),
        hyperparameters=hyper,
        budget=budget,
        seed=args.seed,
        device=args.device,
        real_loop=real_loop,
        subprocesses=args.subproc,
        sim_repeats=args.sim_repeats,
        warm_start=args.warm_start,
    )
    where = "real-loop envs" + " in processes" * args.subproc if real_loop else "replayed episodes"
    print(f"run folder {run.run_dir}; training {run.remaining} env steps on {run.envs.num_envs} {where}")
    pair, latency = inputs.pair, inputs.latency
    settings = {**budget, **hyper, "scenarios": args.scenarios, "pair": pair.name, "seed": args.seed}
    settings["latency_profiles"] = args.latency_profiles
    if not run.train(settings | {"latency_device": latency.device, "command": command}):
        print(
            f"\ninterrupted at {run.model.num_timesteps} steps; checkpoint saved. Continue with:\n"
            f"  python experiments/train_ppo.py --resume {run.run_dir}"
        )
        return
    best, normalizer, predict = run.best()
    kept = run.state["best"]
    selected = kept["ratio_vs_tcp"]
    chosen = selection_section(run.selection, kept, run.state.get("warm_start"))
    print("\n" + chosen)

    # 3. The comparison on test traces (simulator, modeled time): reported, never selected on.
    comparison = run.comparison()
    trained = [s.name for s in scenarios]
    compared = scenarios + [
        s for s in load_scenarios(args.eval_scenarios, args.preset) if s.name not in trained
    ]
    rows = {s.name: comparison.in_simulator(s, predict) for s in compared}

    # 4. Export, parity check, then validation in the real loop.
    folder = Path(args.policies_dir) / args.policy_name
    results = stored_results(rows, trained)
    run.export(folder, best, normalizer, results, scenarios=args.scenarios, command=command)
    print(f"\nexported {folder} (parity with the SB3 policy checked on {PARITY_OBSERVATIONS:,} observations)")
    real_rows = {}
    if args.validate_scenarios:
        policy = LearnedController.load(folder)
        real_rows = check_scenarios(
            args.validate_scenarios,
            comparison,
            rows,
            policy,
            preset=args.preset,
            prompts=args.validate_prompts,
            repeats=args.validate_repeats,
            seed=args.seed,
        )
    text = (
        chosen
        + simulator_section(rows, selected, unseen_note(compared, pair))
        + (real_loop_section(real_rows, args.validate_prompts, args.validate_repeats) if real_rows else "")
        + f"\nCommand: `{command}` ({(time.perf_counter() - started) / 60:.1f} minutes"
        f"{' since the resume' if args.resume else ''}). Machine: {machine_clause(latency.device)}.\n"
    )
    write_text_atomic(run.run_dir / "results.md", text)
    write_text_atomic(folder / "results.md", text)
    run.close()
    print("\n" + text)


if __name__ == "__main__":
    main()
