"""Run controllers through the real-loop env (``specrl/SpecDecode-v0``) and compare them: the quick
look (``specrl evaluate`` is the full comparison).

Per scenario, the library's real loop (:func:`specrl.evaluation.harness.run_real_loop`) plays every
controller on the split's first prompts (round robin over the start domains, episode i reset with
seed SEED + i) in a seeded random order, after untimed warm-up episodes of the first controller.
Per scenario a table: tokens/sec (total tokens / total decode seconds, wall-clock or modeled as the
scenario says), the ratio to the first controller, acceptance rate, mean k and tau asked for.
Controllers are named as in ``specrl.evaluation.roster`` (plain, static:K[:TAU], tcp,
tcp-tau0.25, hf-heuristic, hf-confidence), each bounded by the scenario's k_max.

    specrl compare                           # all shipped scenarios
    specrl compare --scenarios code math_t1 --controllers static:0 tcp --episodes 4
    specrl compare --preset tiny --time modeled --episodes 1   # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
from functools import partial
from pathlib import Path

from specrl.cli.pair_options import add_pair_arguments, check_pair_arguments, pair_values
from specrl.names import SPLITS

HELP = "run controllers in the real loop and compare them (the quick look)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--scenarios", nargs="+", metavar="SCENARIO", help="YAML paths or shipped names (default: all)"
    )
    parser.add_argument(
        "--controllers",
        nargs="+",
        metavar="NAME",
        help="controllers, the first the ratio's reference (default: static:0 static:4 and every rule)",
    )
    parser.add_argument(
        "--episodes", type=int, default=8, help="episodes per scenario and controller (default 8)"
    )
    parser.add_argument(
        "--warmup", type=int, default=1, help="untimed warm-up episodes per scenario (default 1)"
    )
    parser.add_argument("--split", choices=SPLITS, default="test", help="prompt split (default test)")
    parser.add_argument(
        "--time", choices=("wallclock", "modeled"), help="time source (default: each scenario's own)"
    )
    parser.add_argument("--max-new-tokens", type=int, help="override the scenarios' tokens per episode")
    parser.add_argument("--seed", type=int, default=0, help="episode i resets with seed SEED + i (default 0)")
    add_pair_arguments(parser)
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--markdown", type=Path, help="also write the tables to this .md file")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.episodes < 1 or args.warmup < 0:
        parser.error("--episodes must be >= 1 and --warmup >= 0")
    check_pair_arguments(args, parser)
    import specrl
    from specrl.envs import (
        EpisodeSummary,
        PairSpec,
        ScenarioError,
        SpecDecodeEnv,
        load_scenario,
        shipped_scenarios,
    )
    from specrl.evaluation import roster
    from specrl.evaluation.harness import Settings, run_real_loop
    from specrl.evaluation.scenario_choice import Overrides
    from specrl.io import write_text_atomic

    args.controllers = args.controllers or ["static:0", "static:4", *roster.RULES]
    try:
        scenarios = [load_scenario(name) for name in (args.scenarios or shipped_scenarios())]
        for scenario in scenarios:  # every name builds under every scenario's k_max, before a model loads
            for name in args.controllers:
                roster.make_controller(name, scenario.k_max)
    except (ScenarioError, roster.ControllerNameError) as error:
        parser.error(str(error))
    if not scenarios:
        raise SystemExit("no scenarios: pass --scenarios PATH ... (specrl/scenarios/ holds the shipped ones)")
    overrides = Overrides(max_new_tokens=args.max_new_tokens, **pair_values(args))
    scenarios = [overrides.apply(s) for s in scenarios]
    pairs: dict[PairSpec, specrl.ModelPair] = {}
    results: dict[str, dict] = {}
    tables = []
    settings = Settings(
        repeats=1, warmup=args.warmup, warmup_rows=tuple(args.controllers[:1]), hf=False, seed=args.seed
    )
    for scenario in scenarios:
        spec = scenario.pair
        if spec not in pairs:
            pairs[spec] = spec.load()
        env = SpecDecodeEnv(scenario, pair=pairs[spec], split=args.split, time=args.time, prepare=True)
        start_domains = sum(1 for weight in scenario.prompts.domains.values() if weight > 0)
        plan = roster.episode_plan(
            env.scenario, env.prompt_sets, math.ceil(args.episodes / start_domains), args.seed
        )
        factories = {name: partial(roster.make_controller, name, scenario.k_max) for name in args.controllers}
        records, _ = run_real_loop(env, roster.first_episodes(plan, args.episodes), factories, None, settings)
        totals = {name: EpisodeSummary() for name in factories}
        for name, repeats in records.items():
            for record in repeats[0]:
                totals[name].add(record.summary)
        time = env.scenario.reward.time
        tables.append(format_table(scenario.name, time, totals))
        results[scenario.name] = {
            "time": time,
            "split": args.split,
            "episodes": args.episodes,
            "pair": pairs[spec].name,
            "controllers": {name: s.to_dict() for name, s in totals.items()},
        }
    print("\n\n".join(tables))
    if args.json is not None:
        write_text_atomic(args.json, json.dumps(results, indent=2))
    if args.markdown is not None:
        write_text_atomic(args.markdown, "\n\n".join(tables) + "\n")
    return 0


def format_table(name: str, time: str, rows: dict) -> str:
    from specrl.tables import markdown_table

    reference = next(iter(rows.values())).tokens_per_s
    header = ["controller", "tokens/s", "ratio", "acceptance", "mean k", "mean tau", "tokens", "steps"]
    lines = []
    for label, s in rows.items():
        ratio = s.tokens_per_s / reference if reference > 0 else float("nan")
        lines.append(
            [
                label,
                f"{s.tokens_per_s:.1f}",
                f"{ratio:.2f}x",
                f"{s.acceptance_rate:.3f}",
                f"{s.mean_k:.2f}",
                f"{s.mean_tau:.3f}",
                s.tokens,
                s.steps,
            ]
        )
    table = markdown_table(header, lines, align=[None] + ["right"] * (len(header) - 1))
    return f"### {name} ({time} time)\n\n{table}"
