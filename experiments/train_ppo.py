"""Train a PPO policy that picks (k, tau) for every speculative iteration, and export it.

With no arguments, on the embedded default pair:

1. makes sure the pair exists (builds it with progress if not), calibrates the latency model
   of this machine (cached) and loads or records the acceptance traces (shipped for the
   default pair, else collected and cached);
2. trains PPO (stable-baselines3) on the vectorised trace-replay simulator over a mix of
   scenarios (greedy and temperature 1; code/prose/math mixed, code->math, C headers, Perl)
   on their train traces, evaluating on their validation traces against the TCP heuristic
   every --eval-freq steps and keeping the best (checkpoint selection sees validation only);
3. exports the best policy to specrl/policies/<name>/ (a torch.export program + metadata, parity-checked);
4. prints the comparison on test traces in the simulator (PPO vs TCP vs best static in
   hindsight vs the HF heuristic vs the clairvoyant oracle), the unseen license domain
   included, then validates in the real loop (wall clock, test prompts, medians over repeats).

Protocol (docs/design.md section 4b): train on train, select on validation, report on test once.

TensorBoard: ``tensorboard --logdir runs`` (scalars under specdec/, SB3's under train/ and
rollout/, hyperparameters under TEXT, histograms of k and tau). Ctrl-C (or SIGTERM) saves a checkpoint;
``--resume runs/<run>`` continues it.

    python experiments/train_ppo.py                                   # the default run
    python experiments/train_ppo.py --total-timesteps 2000000 --policy-name long
    python experiments/train_ppo.py --preset tiny --total-timesteps 4096 --validate-prompts 1  # smoke
    python experiments/train_ppo.py --train-on real --subproc --n-envs 2 --scenarios code  # real loop
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import signal
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import yaml
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import configure
from stable_baselines3.common.vec_env import VecMonitor, VecNormalize
from tqdm.auto import tqdm

from specrl.controllers import HFHeuristicController, PoolRuleController, StaticController, TCPController
from specrl.controllers.learned import LearnedController
from specrl.controllers.stop_rules import AcceptancePredictor, AdaEDLController, SpecDecPPController
from specrl.engine.types import DEFAULT_DRAFTER
from specrl.envs import ScenarioError, SpecDecodeEnv, VecTraceReplay, cached_traces, load_scenario
from specrl.envs.vec_real import real_loop_vec_env
from specrl.evaluation.compare import by_player, compare, env_players, paired_ratios, tokens_per_s
from specrl.export import export_policy
from specrl.export.layout import SHIPPED_POLICY_DIR
from specrl.export.write import PARITY_OBSERVATIONS
from specrl.io import write_text_atomic
from specrl.latency import calibrated, latency_path
from specrl.oracle import best_static, clairvoyant_bound
from specrl.rule_tuning import fit_acceptance_predictor, tuned_rules
from specrl.tables import markdown_table
from specrl.training import (
    BAR_RULES,
    BEST_MODEL,
    BEST_NORMALIZER,
    RUN_RECORD,
    ScenarioMix,
    SpecdecMetrics,
    ValidationEvaluation,
    comparison_ratios,
    episode_seed,
    evaluate_controller,
    evaluate_policy,
    every,
    hyperparameter_table,
    run_record,
    save_state,
    tensorboard_writer,
    write_run_record,
)

REPO = Path(__file__).resolve().parent.parent
REAL_ENVS = 4  # default --n-envs of --train-on real (at most the CPU count)
# Eight parts, as many as before C headers and Perl joined: each part of the ScenarioMix costs
# a vectorised step of its own, so code, prose and math train together in "mixed" (one domain
# per episode) and the default run keeps its time budget.
DEFAULT_SCENARIOS = [
    "mixed",
    "c_header",
    "perl",
    "code_to_math",
    "mixed_t1",
    "c_header_t1",
    "perl_t1",
    "code_to_math_t1",
]
# Reported on test besides the training scenarios: each domain alone, and the unseen one.
DEFAULT_EVAL_SCENARIOS = ["code", "prose", "math", "code_t1", "prose_t1", "math_t1", "license", "license_t1"]


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
    parser.add_argument("--total-timesteps", type=int, default=None, help="env steps (default: the YAML's)")
    parser.add_argument(
        "--n-envs",
        type=int,
        default=None,
        help=f"parallel replayed episodes (default: the YAML's; with --train-on real, {REAL_ENVS} at most)",
    )
    parser.add_argument(
        "--eval-freq", type=int, default=None, help="env steps between evaluations on validation traces"
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
        "--train-on",
        choices=("replay", "real"),
        default="replay",
        help="replay: the trace-replay simulator (default, ~1e5 steps/s); real: the real loop on train "
        "prompts, with each scenario's time source (slow: tens of steps/s per env)",
    )
    parser.add_argument(
        "--subproc",
        action="store_true",
        help="with --train-on real: each env in its own process (SB3's SubprocVecEnv; each loads the pair)",
    )
    args = parser.parse_args()
    if args.subproc and args.train_on != "real":
        parser.error("--subproc runs real-loop envs in processes: give it with --train-on real")
    for flag in (
        "total_timesteps",
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


class Progress(BaseCallback):
    """A tqdm bar over env steps."""

    def __init__(self, total: int, start: int) -> None:
        super().__init__()
        self.bar = tqdm(total=total, initial=start, unit="step", desc="PPO", smoothing=0.1)

    def _on_step(self) -> bool:
        self.bar.update(self.num_timesteps - self.bar.n)
        return True

    def _on_training_end(self) -> None:
        self.bar.close()


def interrupt_on_signals() -> None:
    """Ctrl-C (SIGINT) and SIGTERM raise KeyboardInterrupt, which saves a checkpoint. Set
    explicitly: a process started in the background by a script inherits SIGINT ignored, and a
    scheduler stops jobs with SIGTERM."""

    def interrupt(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGINT, interrupt)
    signal.signal(signal.SIGTERM, interrupt)


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    interrupt_on_signals()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    config = yaml.safe_load(Path(args.config).read_text())
    hyper, budget = dict(config["ppo"]), dict(config["train"])
    if args.train_on == "real":  # the YAML's env count is the replay's (hundreds): one per core here
        budget["n_envs"] = min(REAL_ENVS, os.cpu_count() or 1)
    for key in ("total_timesteps", "n_envs", "eval_freq"):
        if getattr(args, key) is not None:
            budget[key] = getattr(args, key)
    torch.manual_seed(args.seed)

    # 1. The pair, its latency on this machine, the traces.
    scenarios = load_scenarios(args.scenarios, args.preset)
    pair = scenarios[0].pair.load()
    k_max, tau_grid, drafters = scenarios[0].k_max, tuple(scenarios[0].tau_grid), scenarios[0].drafters
    if any(s.k_max != k_max or tuple(s.tau_grid) != tau_grid or s.drafters != drafters for s in scenarios):
        raise SystemExit("all training scenarios must share k_max, tau_grid and drafters (one action space)")
    latency = calibrated(pair, k_max=k_max, drafters=drafters)
    print(
        f"pair {pair.name} on {pair.device}; latency model {latency.device}: target "
        f"{latency.target_seconds(1, 256) * 1e3:.2f} ms (1 token, context 256), draft "
        f"{latency.draft_seconds(256) * 1e3:.2f} ms; plain {latency.plain_tokens_per_s:.0f} tokens/s"
    )
    train = {s.name: cached_traces(s, "train", pair) for s in scenarios}
    validation = {s.name: cached_traces(s, "validation", pair) for s in scenarios}  # selection only

    # 2. The run folder, the envs, the model (new or resumed).
    if args.resume:
        run_dir = Path(args.resume)
        state = json.loads((run_dir / "state.json").read_text())
        if (run_dir / "progress.csv").is_file():  # SB3's CSV output starts a new file: keep the old one
            (run_dir / "progress.csv").rename(run_dir / f"progress-until-{state['timesteps']}.csv")
    else:
        label = scenarios[0].name if len(scenarios) == 1 else "mix"
        run_dir = Path(args.runs_dir) / f"{label}__{args.exp_name}__{args.seed}__{int(time.time())}"
        run_dir.mkdir(parents=True, exist_ok=True)
        state = {"timesteps": 0, "command": command}
        run = run_record(
            command=command,
            seed=args.seed,
            arguments=vars(args),
            hyperparameters=hyper,
            budget=budget,
            scenarios=scenarios,
            pair=pair.name,
            latency_file=latency_path(pair),
        )
        write_run_record(run_dir, run)
    # The record of how the run started; a resumed run keeps it (its commit is the first session's).
    record = json.loads((run_dir / RUN_RECORD).read_text()) if (run_dir / RUN_RECORD).is_file() else None
    # The per-token stop dimension applies a logistic acceptance predictor fitted on the train
    # traces; it is part of the run (a resumed run keeps it) and of the exported policy.
    predictor = None if args.no_stop else run_predictor(run_dir, train.values())
    stop_grid = None if args.no_stop else tuple(scenarios[0].stop_grid)
    if stop_grid is not None and any(tuple(s.stop_grid) != stop_grid for s in scenarios):
        raise SystemExit("all training scenarios must share stop_grid (one action space)")
    counts = envs_per_scenario(budget["n_envs"], len(scenarios))
    if args.train_on == "real":  # real decoding of train prompts, one env per row
        mix = real_loop_vec_env(scenarios, counts, latency, predictor=predictor, subprocesses=args.subproc)
    else:
        mix = ScenarioMix(
            [
                VecTraceReplay(s, train[s.name], latency, num_envs=n, seed=args.seed + i, predictor=predictor)
                for i, (s, n) in enumerate(zip(scenarios, counts, strict=True))
            ]
        )
    mix.seed(args.seed)
    monitored = VecMonitor(mix)  # SB3's episode scalars: rollout/ep_rew_mean and rollout/ep_len_mean
    normalize = bool(budget.get("normalize_observations", False))
    if args.resume:
        venv = VecNormalize.load(str(run_dir / "vecnormalize.pkl"), monitored)
        model = PPO.load(run_dir / "checkpoint.zip", env=venv, device=args.device)
    else:
        # Rewards are normalised: scenarios differ in scale. Observations lie in [0, 1] already;
        # normalising them too is an option of the YAML (the statistics are baked into the export).
        venv = VecNormalize(monitored, norm_obs=normalize, norm_reward=True, gamma=hyper["gamma"])
        model = PPO("MlpPolicy", venv, seed=args.seed, device=args.device, verbose=0, **hyper)

    # Checkpoint selection in the simulator: the policy against TCP on the same validation traces.
    tcp_validation = tcp_results(scenarios, validation, latency, args.sim_repeats)

    def evaluate(predict, traces: dict | None = None, tcp: dict | None = None) -> dict:
        """The policy against TCP on ``traces`` (default: the validation traces)."""
        traces, tcp = (validation, tcp_validation) if traces is None else (traces, tcp)
        results = {
            s.name: evaluate_policy(
                predict, s, traces[s.name], latency, args.sim_repeats, predictor=predictor
            )
            for s in scenarios
        }
        ratios = {name: r.tokens_per_s / tcp[name].tokens_per_s for name, r in results.items()}
        scalars = {f"{name}/tokens_per_s": r.tokens_per_s for name, r in results.items()}
        scalars.update({f"{name}/ratio_vs_tcp": ratios[name] for name in ratios})
        return {
            "results": results,
            "ratio_vs_tcp": float(np.exp(np.mean(np.log(list(ratios.values()))))),
            "scalars": scalars,
        }

    def save_checkpoint() -> None:
        model.save(run_dir / "checkpoint.zip")
        venv.save(str(run_dir / "vecnormalize.pkl"))
        save_state(run_dir / "state.json", {**state, "timesteps": model.num_timesteps})

    def save_best() -> None:
        model.save(run_dir / BEST_MODEL)
        venv.save(str(run_dir / BEST_NORMALIZER))  # the observation statistics of that moment

    evaluation = ValidationEvaluation(
        lambda: evaluate(policy_predict(model, venv if normalize else None)), save_best, state
    )
    callbacks = [
        SpecdecMetrics(tau_grid, stop_grid=stop_grid, drafters=drafters),
        every(budget["eval_freq"], evaluation),
        every(budget["checkpoint_freq"], save_checkpoint),
        Progress(budget["total_timesteps"], state["timesteps"]),
    ]
    model.set_logger(configure(str(run_dir), ["csv", "tensorboard"]))
    writer = tensorboard_writer(model.logger)
    settings = {
        **budget,
        **hyper,
        "scenarios": args.scenarios,
        "pair": pair.name,
        "seed": args.seed,
        "latency_device": latency.device,
        "command": command,
    }
    writer.add_text("hyperparameters", hyperparameter_table(settings))
    remaining = budget["total_timesteps"] - state["timesteps"]
    where = (
        "replayed episodes"
        if args.train_on == "replay"
        else "real-loop envs" + " in processes" * args.subproc
    )
    print(f"run folder {run_dir}; training {remaining} env steps on {mix.num_envs} {where}")
    try:
        if remaining > 0:
            model.learn(total_timesteps=remaining, callback=callbacks, reset_num_timesteps=not args.resume)
    except KeyboardInterrupt:
        save_checkpoint()
        print(
            f"\ninterrupted at {model.num_timesteps} steps; checkpoint saved. Continue with:\n"
            f"  python experiments/train_ppo.py --resume {run_dir}"
        )
        model.logger.close()
        return
    save_checkpoint()
    evaluation.init_callback(model)
    evaluation.run()  # the final model competes with the best checkpoint
    best = PPO.load(run_dir / BEST_MODEL, device=args.device)
    best_normalizer = VecNormalize.load(str(run_dir / BEST_NORMALIZER), mix) if normalize else None
    print(
        f"best validation ratio vs TCP {state['best_ratio_vs_tcp']:.3f} at {state['best_timesteps']} steps "
        "(the checkpoint kept)"
    )

    # 3. The comparison on test traces (simulator, modeled time): reported, never selected on.
    predict = policy_predict(best, best_normalizer)
    test = {s.name: cached_traces(s, "test", pair) for s in scenarios}
    report = evaluate(predict, test, tcp_results(scenarios, test, latency, args.sim_repeats))
    rows = {}
    # the SpecDec++-style baseline's predictor: the run's, or one fitted the same way
    rule_predictor = predictor or fit_acceptance_predictor(train.values())
    compared = scenarios + [e for e in load_scenarios(args.eval_scenarios, args.preset) if e.name not in test]
    for s in compared:
        traces, repeats = test.get(s.name) or cached_traces(s, "test", pair), args.sim_repeats
        static = best_static(traces, latency, tau_grid, count=repeats, drafters=s.drafters)
        pool_rule = {}
        if len(s.drafters) > 1:  # the seed's pool rule, at its k tuned on validation traces
            k = tuned_pool_k(s, pair, latency, repeats)
            rule = PoolRuleController(s.drafters, k=k)
            pool_rule = {"pool-rule": evaluate_controller(rule, s, traces, latency, repeats).tokens_per_s}
            pool_rule["_pool-rule"] = {"k": k}
        rows[s.name] = {
            "plain": evaluate_controller(StaticController(0), s, traces, latency, repeats).tokens_per_s,
            "tcp": evaluate_controller(TCPController(), s, traces, latency, repeats).tokens_per_s,
            "hf-heuristic": evaluate_controller(
                HFHeuristicController(), s, traces, latency, repeats
            ).tokens_per_s,
            f"best static {static_label(static.k, static.tau, static.drafter)}": static.tokens_per_s,
            **rule_baselines(s, pair, latency, repeats, rule_predictor, traces),
            **pool_rule,
            "ppo": evaluate_policy(predict, s, traces, latency, repeats, predictor=predictor).tokens_per_s,
            "oracle": clairvoyant_bound(traces, latency, count=repeats, drafters=s.drafters).tokens_per_s,
            "_best_static": (static.k, static.tau, static.drafter),
        }
    sim_table = comparison_table(rows)

    # 4. Export, parity check, then validation in the real loop.
    folder = Path(args.policies_dir) / args.policy_name
    export_policy(
        best,
        folder,
        obs_normalizer=best_normalizer,
        k_max=k_max,
        tau_grid=tau_grid,
        stop_grid=stop_grid,
        predictor=predictor,
        drafters=drafters,
        scenarios=args.scenarios,
        pair=pair.name,
        evaluation={
            "protocol": "trained on train traces, checkpoint selected on validation traces, reported on test",
            "sim_test_tokens_per_s": {
                n: {k: v for k, v in r.items() if not k.startswith("_")} for n, r in rows.items()
            },
            "ratio_vs_tcp_sim_test": report["ratio_vs_tcp"],
            "ratio_vs_tcp_sim_validation": state["best_ratio_vs_tcp"],
            "training_steps": model.num_timesteps,
            "run_dir": str(run_dir),
        },
        command=command,
        provenance=record,
    )
    print(f"\nexported {folder} (parity with the SB3 policy checked on {PARITY_OBSERVATIONS:,} observations)")
    real_table = (
        validate_real(args, pair, latency, folder, rows, rule_predictor) if args.validate_scenarios else ""
    )
    text = (
        "#### Test traces, simulator (modeled time), tokens/s\n\n"
        f"Checkpoint selected on validation traces (ratio vs TCP {state['best_ratio_vs_tcp']:.3f} there); "
        "these test traces are reported once; best static and oracle are in hindsight on them (bounds). "
        f"{unseen_note(compared, pair)}\n\n{sim_table}\n"
        + (
            f"\n#### Real loop on test prompts (wall clock), tokens/s\n\n{args.validate_prompts} test "
            f"prompts per domain, every controller on each in a random order, {args.validate_repeats} "
            "repeats; tokens/s: the median over repeats; PPO's ratios: the median over repeats of the "
            f"ratio within a repeat (paired, so drift of the machine between repeats cancels).\n\n"
            f"{real_table}\n"
            if real_table
            else ""
        )
        + f"\nCommand: `{command}` ({(time.perf_counter() - started) / 60:.1f} minutes"
        f"{' since the resume' if args.resume else ''}). Machine: {platform.machine()}, "
        f"{os.cpu_count()} logical CPUs, torch {torch.__version__} ({latency.device}).\n"
    )
    write_text_atomic(run_dir / "results.md", text)
    write_text_atomic(folder / "results.md", text)
    model.logger.close()
    print("\n" + text)


def envs_per_scenario(n_envs: int, scenarios: int) -> list[int]:
    """``n_envs`` replayed episodes split as evenly as possible (at least one per scenario)."""
    base, extra = divmod(max(n_envs, scenarios), scenarios)
    return [base + (i < extra) for i in range(scenarios)]


def tcp_results(scenarios: list, traces: dict, latency, repeats: int) -> dict:
    """TCP (the reference of the ratio) on each scenario's traces."""
    return {
        s.name: evaluate_controller(TCPController(), s, traces[s.name], latency, repeats) for s in scenarios
    }


def unseen_note(scenarios: list, pair) -> str:
    """Which compared scenarios use a domain with no train prompts (the unseen test domain)."""
    unseen = []
    for scenario in scenarios:
        try:
            scenario.with_overrides(split="train").prompt_sets(pair)
        except ScenarioError:
            unseen.append(scenario.name)
    if not unseen:
        return ""
    names = ", ".join(unseen)
    return f"Unseen domain (no train or validation prompts; no training or selection saw it): {names}."


def run_predictor(run_dir: Path, train_traces) -> AcceptancePredictor:
    """The run's acceptance predictor: read back when resuming, else fitted on the train traces."""
    path = run_dir / "acceptance_predictor.json"
    if path.is_file():
        return AcceptancePredictor.load(path)
    predictor = fit_acceptance_predictor(train_traces)
    predictor.save(path)
    return predictor


def rule_baselines(scenario, pair, latency, repeats: int, predictor, traces) -> dict:
    """AdaEDL and the SpecDec++-style rule on ``traces`` (test), tuned on validation traces
    (:func:`specrl.rule_tuning.tuned_rules`); ``_<name>`` keys hold the tuned settings."""
    rows = {}
    for name, tuned in tuned_rules(scenario, pair, latency, predictor, repeats).items():
        rows[name] = evaluate_controller(tuned.controller, scenario, traces, latency, repeats).tokens_per_s
        rows[f"_{name}"] = tuned.setting
    return rows


def load_scenarios(names: list[str], preset: str | None) -> list:
    """Scenarios by name, on ``preset``'s pair if given, with modeled time."""
    return [load_scenario(name).with_overrides(time="modeled", preset=preset) for name in names]


def policy_predict(model: PPO, normalizer: VecNormalize | None):
    """observations (N, 19) -> deterministic actions (N, 2), through the training normalisation."""
    if normalizer is None:
        return lambda observations: model.predict(observations, deterministic=True)[0]
    return lambda observations: model.predict(normalizer.normalize_obs(observations), deterministic=True)[0]


REAL_RULES = (*BAR_RULES, "static")  # the controller names of the real-loop comparison


def static_label(k: int, tau: float, drafter: str) -> str:
    """``(k=.., tau=..)``, with the drafter when it is not the draft."""
    return f"(k={k}, tau={tau}" + (f", {drafter})" if drafter != DEFAULT_DRAFTER else ")")


def tuned_pool_k(scenario, pair, latency, repeats: int) -> int:
    """The pool rule's k: the fastest of :data:`POOL_RULE_KS` on the validation traces."""
    traces = cached_traces(scenario, "validation", pair)
    speeds = {
        k: evaluate_controller(PoolRuleController(scenario.drafters, k=k), scenario, traces, latency, repeats)
        for k in POOL_RULE_KS
    }
    return max(speeds, key=lambda k: speeds[k].tokens_per_s)


POOL_RULE_KS = (1, 2, 4, 6)  # as in experiments/bench_drafters.py


def comparison_table(rows: dict[str, dict]) -> str:
    """Markdown: a row per scenario, tokens/s per controller, and PPO's ratios to TCP, to the best
    static setting in hindsight, to the best of every rule (that static setting included) and to
    the clairvoyant oracle. A controller a scenario has no row for (the pool rule without a pool)
    is shown as "-"."""
    names = list(
        dict.fromkeys(
            n
            for row in rows.values()
            for n in row
            if not n.startswith(("_", "best static")) and n not in ("oracle", "ppo")
        )
    ) + ["ppo"]
    columns = [
        *names,
        "best static",
        "oracle",
        "PPO / TCP",
        "PPO / best static",
        "PPO / best rule",
        "PPO / oracle",
    ]
    lines = []
    for scenario, row in rows.items():
        static_name = next(n for n in row if n.startswith("best static"))
        ratios = comparison_ratios(row)
        cells = [f"{row[n]:.1f}" if n in row else "-" for n in names] + [
            f"{row[static_name]:.1f} {static_label(*row['_best_static'])}",
            f"{row['oracle']:.1f}",
        ]
        cells += [f"{ratios[key]:.3f}" for key in ("tcp", "best static", "best rule", "oracle")]
        lines.append([scenario, *cells])
    return markdown_table(["scenario", *columns], lines)


def validate_real(args, pair, latency, folder: Path, rows: dict[str, dict], predictor) -> str:
    """PPO against plain decoding and every rule (TCP, the HF heuristic, AdaEDL and the
    SpecDec++-style rule with their settings tuned on validation traces, and each scenario's best
    static setting in hindsight on its test traces) in the real env on test prompts.

    Each repeat runs every controller on every prompt, the controllers in a new random order on
    each prompt, so the machine's slow and fast phases hit them alike. Tokens/s is the median over
    repeats; PPO's ratios are paired: the median over repeats of PPO's throughput over the other
    controller's in the same repeat, which cancels the machine's drift between repeats. The best
    rule is the rule with the highest median."""
    learned = LearnedController.load(folder)
    names = ["plain", *(r for r in BAR_RULES if r != "pool-rule")]
    if any(len(load_scenario(name).drafters) > 1 for name in args.validate_scenarios):
        names.append("pool-rule")
    names += ["static", "ppo"]
    lines = []
    jobs = []
    for name in args.validate_scenarios:
        scenario = load_scenario(name).with_overrides(preset=args.preset)
        env = SpecDecodeEnv(scenario, pair=pair, split="test", time="wallclock", latency=latency)
        if name not in rows:
            modeled = scenario.with_overrides(time="modeled")
            traces = cached_traces(modeled, "test", pair)
            static = best_static(
                traces, latency, scenario.tau_grid, count=args.sim_repeats, drafters=scenario.drafters
            )
            rows[name] = {
                "_best_static": (static.k, static.tau, static.drafter),
                **rule_baselines(modeled, pair, latency, args.sim_repeats, predictor, traces),
            }
            if len(scenario.drafters) > 1:
                rows[name]["_pool-rule"] = {"k": tuned_pool_k(modeled, pair, latency, args.sim_repeats)}
        k, tau, drafter = rows[name]["_best_static"]
        adaedl, specdecpp = rows[name]["_adaedl"], rows[name]["_specdec++"]
        controllers = {
            "plain": StaticController(0),
            "tcp": TCPController(),
            "hf-heuristic": HFHeuristicController(),
            "adaedl": AdaEDLController(k=adaedl["k"], gamma=adaedl["gamma"]),
            "specdec++": SpecDecPPController(predictor, **specdecpp),
            "static": StaticController(k, tau, drafter),
            "ppo": learned,
        }
        if "_pool-rule" in rows[name]:
            controllers["pool-rule"] = PoolRuleController(scenario.drafters, k=rows[name]["_pool-rule"]["k"])
        episodes = [
            {"domain": domain, "prompt_index": index}
            for domain, weight in scenario.prompts.domains.items()
            if weight > 0
            for index in range(args.validate_prompts)
        ]
        jobs.append((name, env, controllers, episodes))
    rng = np.random.default_rng(args.seed)  # one order stream over every scenario

    def order(names: list[str], repeat: int, index: int) -> list[str]:
        return list(rng.permutation(names))

    for name, env, controllers, episodes in jobs:
        with tqdm(total=1 + len(controllers) * args.validate_repeats * len(episodes), desc=name) as bar:
            trials = compare(
                env_players(env, controllers),
                episodes,
                args.validate_repeats,
                order=order,
                seed=lambda options, repeat, index: episode_seed(args.seed, repeat, index),
                warmup=1,
                warmup_players=["plain"],
                on_trial=lambda trial: bar.update(),
            )
        throughput = {
            c: [tokens_per_s(summaries) for summaries in repeats]
            for c, repeats in by_player(trials, list(controllers)).items()
        }
        median = {c: statistics.median(v) for c, v in throughput.items()}
        paired = paired_ratios(throughput, "ppo")
        best_rule = max([r for r in REAL_RULES if r in median], key=median.__getitem__)
        static = controllers["static"].action
        cells = [f"{median[c]:.1f}" if c in median else "-" for c in names[:-2]] + [
            f"{median['static']:.1f} {static_label(static.k, static.tau, static.drafter)}",
            f"{median['ppo']:.1f}",
            f"{paired['plain']:.3f}",
            f"{paired['tcp']:.3f}",
            f"{paired['static']:.3f}",
            f"{paired[best_rule]:.3f} ({best_rule})",
        ]
        lines.append([name, *cells])
    header = ["scenario", *names[:-2], "best static", "PPO"]
    header += ["PPO / plain", "PPO / TCP", "PPO / best static", "PPO / best rule (which)"]
    return markdown_table(header, lines)


if __name__ == "__main__":
    main()
