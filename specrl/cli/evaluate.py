"""Evaluate every controller side by side on test prompts: simulator and real loop.

Per scenario (default: every shipped one), in one process: plain decoding, static (k, tau) rows
and in the simulator the whole grid with its best setting, the TCP heuristic, our versions of
Hugging Face's heuristic schedule and confidence threshold, HF ``generate`` itself (wall clock
only), the learned policies (``--policy``) and the clairvoyant oracle (simulator only). Columns:
tokens/sec in the simulator (modeled time, test traces) and in the real loop (median over
repeats, rows interleaved), speed-up over plain, ratio to TCP, acceptance, mean k and tau, and
the spread of per-token latency (definitions: specrl/evaluation/). Writes results.json,
results.md, PNG plots and TensorBoard scalars into ``--out``.

    specrl evaluate                       # default pair, all scenarios
    specrl evaluate --scenarios code code_to_math --episodes 4 --repeats 5
    specrl evaluate --preset tiny --sim-prompts-per-domain 1 --repeats 1 \\
        --max-new-tokens 72 --latency constant --scenarios code code_to_math   # smoke run
    specrl evaluate --ray 10.0.0.5:6379 --episodes 24   # the real loop on a Ray cluster

With ``--ray`` the real-loop episodes are sharded across workers, each playing every row on its
share (paired ratios); use workers of one hardware type for wall-clock time. ``--split
validation`` runs the same comparison on validation prompts, for tuning (docs/design.md section 4b).
Use a quiet machine: speed claims are the ratios, measured side by side.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from specrl.cli import options_of
from specrl.cli.pair_options import add_pair_arguments, check_pair_arguments, pair_values
from specrl.cli.ray import add_ray_arguments, pool_from_args

HELP = "every controller side by side on test prompts: simulator and real loop"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    what = parser.add_argument_group("what to run")
    what.add_argument(
        "--scenarios", nargs="+", metavar="SCENARIO", help="YAML paths or shipped names (default: all)"
    )
    what.add_argument(
        "--policy",
        action="append",
        metavar="POLICY",
        help="a policy name or folder, repeatable (default: the shipped 'default'; a missing one is skipped)",
    )
    what.add_argument(
        "--static",
        nargs="*",
        default=["static:2:0", "static:4:0"],
        metavar="static:K[:TAU]",
        help="static rows besides plain and the best static (the simulator also sweeps the grid)",
    )
    what.add_argument("--no-hf", action="store_true", help="skip the Hugging Face generate rows")
    what.add_argument("--no-sim", action="store_true", help="skip the simulator, the oracle and the grid")
    add_pair_arguments(parser)
    work = parser.add_argument_group("workload")
    work.add_argument(
        "--episodes",
        type=int,
        default=1,
        help="real-loop episodes per scenario, round robin over the start domains (default 1; mixed needs 3)",
    )
    work.add_argument(
        "--sim-prompts-per-domain",
        type=int,
        help="traces per start domain in the simulator (default: the split's shipped count, 8 for test)",
    )
    work.add_argument(
        "--split", choices=("test", "validation"), default="test", help="prompt split (default test)"
    )
    work.add_argument("--max-new-tokens", type=int, help="override the scenarios' tokens per episode")
    work.add_argument(
        "--seed", type=int, default=0, help="episode i resets with SEED + i; seeds the run order"
    )
    timing = parser.add_argument_group("timing")
    timing.add_argument(
        "--repeats", type=int, default=3, help="timed repeats per real-loop row (median; default 3)"
    )
    timing.add_argument(
        "--warmup", type=int, default=1, help="untimed passes over the first episode (default 1)"
    )
    timing.add_argument(
        "--time",
        choices=("wallclock", "modeled"),
        default="wallclock",
        help="time source of the real-loop column (modeled: deterministic, for tests)",
    )
    timing.add_argument(
        "--latency",
        metavar="SOURCE",
        help="modeled time's latency model: calibrated, constant or a .json file",
    )
    timing.add_argument("--threads", type=int, help="torch.set_num_threads (1 on a busy CPU machine)")
    parser.add_argument(
        "--out", type=Path, help="output folder (default: ./results/evaluate/<pair>__<UTC time>/)"
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    add_ray_arguments(parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import torch

    from specrl.envs.scenario import LATENCY_SOURCES
    from specrl.envs.trace_store import DEFAULT_PROMPTS_PER_DOMAIN
    from specrl.evaluation import Settings, roster
    from specrl.evaluation.run_all import evaluate_all, run_name, write_results
    from specrl.evaluation.scenario_choice import Overrides, choose_scenarios
    from specrl.export.layout import policy_folder
    from specrl.provenance import command_line

    if args.sim_prompts_per_domain is None:
        args.sim_prompts_per_domain = DEFAULT_PROMPTS_PER_DOMAIN[args.split]
    check_pair_arguments(args, parser)
    if min(args.episodes, args.repeats, args.sim_prompts_per_domain) < 1 or args.warmup < 0:
        parser.error("--episodes, --repeats and --sim-prompts-per-domain must be >= 1, --warmup >= 0")
    if (
        args.latency is not None
        and args.latency not in LATENCY_SOURCES
        and not args.latency.endswith(".json")
    ):
        parser.error(f"--latency must be one of {LATENCY_SOURCES} or a .json file")
    args.policy = [policy_folder(name) for name in args.policy or ["default"]]
    try:
        args.static = [roster.static_name(*roster.parse_static(name)) for name in args.static]
    except roster.ControllerNameError as error:
        parser.error(str(error))
    if args.threads:
        torch.set_num_threads(args.threads)
    started = datetime.datetime.now(datetime.timezone.utc)
    overrides = Overrides(max_new_tokens=args.max_new_tokens, latency=args.latency, **pair_values(args))
    scenarios = choose_scenarios(args.scenarios, args.split, overrides)
    settings = Settings(
        episodes=args.episodes,
        sim_prompts_per_domain=args.sim_prompts_per_domain,
        split=args.split,
        repeats=args.repeats,
        warmup=args.warmup,
        statics=tuple(args.static),
        hf=not args.no_hf,
        time=args.time,
        seed=args.seed,
        progress=not args.no_progress,
    )
    header = {
        "date": started.isoformat(timespec="seconds"),
        "command": command_line(),
        "argv": sys.argv,
        "config": json.loads(json.dumps(options_of(args), default=str)),
    }
    pool = pool_from_args(args, scenarios[0].pair)
    results = evaluate_all(
        scenarios, settings, args.policy, header, simulate=not args.no_sim, pool=pool, ray_address=args.ray
    )
    if pool is not None:
        pool.close()

    out = args.out or Path("results") / "evaluate" / run_name(results["pair"]["name"], started)
    print(write_results(results, out))
    print(
        f"wrote {out}/: results.json, results.md, *.png and tensorboard/ "
        f"(tensorboard --logdir {out / 'tensorboard'})"
    )
    return 0
