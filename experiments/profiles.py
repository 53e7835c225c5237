"""Does a policy carry to a machine it never trained on? Every latency profile side by side.

Per profile (held out from training, or in the family: ``specrl.latency.family``) and scenario,
on test traces in the simulator: the rules re-tuned on validation traces *under that profile*
(TCP, the HF heuristic, AdaEDL, the SpecDec++-style rule, and the best static setting in
hindsight: the best of them is "the best rule"), and

- ``carried``: the policy trained over the family (``experiments/train_ppo.py``'s default), which
  never saw a held-out profile: seed 0 is ``--carried`` (the shipped default) when given, the
  other seeds are trained here;
- ``alone``: a policy trained on that profile alone (``--latency-profiles P --perturbations 0``),
  for each profile of ``--alone`` and each of ``--alone-seeds`` (default: ``--seeds``): what
  carrying costs;
- ``--also NAME=FOLDER``: other exported policies, on every profile (an earlier default, say).

Each trained run keeps ``policy.pt2``, ``metadata.json`` and ``results.md`` under
``<out>/runs/<arm>/seed<N>/``; a run kept there is not run again (an interrupted call resumes).
Writes ``<out>/profiles.{json,md,png}`` and its section of the result folder's ``README.md``. The
parts: ``experiments/profiles_parts/``.

``--train="FLAGS"`` adds flags to every trained arm's ``train_ppo.py`` (the pool's scenarios, say;
with ``=``, since they begin with ``--``), and ``--scenarios`` names the scenarios compared.
``--split validation`` compares on validation traces instead: to choose between policies under a
profile held out of their training (a validation machine) without looking at the test traces.

    python experiments/profiles.py --carried specrl/policies/default --seeds 0 1 2 --alone-seeds 0 1
    python experiments/profiles.py --carried specrl/policies/pool --seeds 0 1 2 --alone-seeds 0 \\
        --scenarios mixed_pool code_pool prose_pool math_pool --out results/profiles/pool \\
        --also warm-start=results/profiles/pool/warm_start \\
        --train="--scenarios mixed_pool --select-scenarios code_pool prose_pool math_pool \\
        --eval-scenarios code_pool prose_pool math_pool --no-stop --no-warm-start"
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import time
from pathlib import Path

from benchmarks.figures import bar_groups
from benchmarks.result_folder import Run, write_readme
from profiles_parts import page
from profiles_parts.kept_runs import kept_run, page_footer
from profiles_parts.rows import PRICED, curve_steps, prices, profile_row, rule_predictor_of
from tqdm.auto import tqdm

from specrl.envs import ScenarioError, cached_traces
from specrl.export import load_policy
from specrl.io import write_text_atomic
from specrl.latency import HELD_OUT
from specrl.latency.family import profiles as latency_profiles
from specrl.provenance import command_line, machine_clause
from specrl.training.inputs import (
    DEFAULT_EVAL_SCENARIOS,
    DEFAULT_SCENARIOS,
    SELECT_PROFILES,
    load_scenarios,
    named_policies,
)

REPO = Path(__file__).resolve().parent.parent
KEPT = ("policy.pt2", "metadata.json", "results.md")


def trained(arm: str, seed: int, out: Path, flags: list[str]) -> Path:
    """The folder of the arm's policy for ``seed``, trained now unless kept already."""
    return kept_run(arm, seed, out / "runs" / arm / f"seed{seed}", flags, KEPT)


def parse_args() -> tuple[argparse.ArgumentParser, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--carried", type=Path, default=None, help="seed 0 of the carried policy (a folder)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--profiles",
        nargs="+",
        default=[*HELD_OUT, *SELECT_PROFILES],
        help="profiles compared (default: the held-out ones, then the two the family selects under)",
    )
    parser.add_argument(
        "--alone", nargs="*", default=list(HELD_OUT), help="profiles that also get a policy of their own"
    )
    parser.add_argument(
        "--alone-seeds", type=int, nargs="+", default=None, help="the seeds of those (default: --seeds)"
    )
    parser.add_argument("--scenarios", nargs="+", default=DEFAULT_SCENARIOS + DEFAULT_EVAL_SCENARIOS)
    parser.add_argument("--also", nargs="*", default=[], metavar="NAME=FOLDER", help="other policies")
    parser.add_argument(
        "--train",
        default="",
        metavar="FLAGS",
        help='flags every trained arm adds to train_ppo.py: --train="--scenarios ..."',
    )
    parser.add_argument("--repeats", type=int, default=4, help="acceptance draws per sampled trace")
    parser.add_argument(
        "--split",
        choices=("test", "validation"),
        default="test",
        help="the traces compared on: test (the report), or validation (to choose between policies)",
    )
    parser.add_argument("--out", type=Path, default=REPO / "results" / "profiles_alone")
    return parser, parser.parse_args()


def main() -> None:
    parser, args = parse_args()
    known = latency_profiles()
    unknown = [p for p in [*args.profiles, *args.alone] if p not in known]
    if unknown:
        parser.error(f"unknown profile(s) {unknown}; known: {list(known)}")
    if not set(args.alone) <= set(args.profiles):
        parser.error("every --alone profile must be among --profiles")
    also = named_policies(parser, "--also", args.also, reserved=("carried", "alone"))
    alone_seeds = args.alone_seeds or args.seeds
    train = shlex.split(args.train)
    started = time.perf_counter()

    # 1. The policies: carried (trained over the family) and, per --alone profile, its own.
    carried = {}
    for seed in args.seeds:
        use_given = seed == 0 and args.carried is not None
        carried[seed] = args.carried if use_given else trained("carried", seed, args.out, train)
    alone_flags = {p: [*train, "--latency-profiles", p, "--perturbations", "0"] for p in args.alone}
    alone = {
        p: {seed: trained(f"alone-{p}", seed, args.out, alone_flags[p]) for seed in alone_seeds}
        for p in args.alone
    }

    # 2. Every scenario under every profile, the rules re-tuned there, on the same draws.
    scenarios = load_scenarios(args.scenarios, None)
    pair = scenarios[0].pair.load()
    for scenario in scenarios if args.split != "test" else ():
        try:
            cached_traces(scenario, args.split, pair)
        except ScenarioError as error:
            parser.error(f"--split {args.split}: {error}; leave that scenario out of --scenarios")
    rule_predictor = rule_predictor_of(load_scenarios(DEFAULT_SCENARIOS, None), pair)
    carried_policies = [load_policy(folder) for folder in carried.values()]
    others = {name: [load_policy(folder)] for name, folder in also.items()}
    rows = []
    jobs = [(profile, s) for profile in args.profiles for s in scenarios]
    for profile, scenario in tqdm(jobs, desc="profiles x scenarios"):
        policies = {"carried": carried_policies, **others}
        if profile in alone:
            policies["alone"] = [load_policy(folder) for folder in alone[profile].values()]
        row = profile_row(
            pair,
            profile,
            known[profile],
            scenario,
            policies,
            repeats=args.repeats,
            rule_predictor=rule_predictor,
            split=args.split,
        )
        rows.append(row)

    # 3. The page: prices, then every scenario's ratios per profile, the worst and the mixed one.
    # what the carried policy never trained on (its metadata's family; the shipped family holds out HELD_OUT)
    trained_over = carried_policies[0].metadata.get("latency_profiles", {}).get("profiles")
    held = set(HELD_OUT) if trained_over is None else set(known) - set(trained_over)
    names = ["carried", "alone", PRICED, *also]
    command = command_line()
    text = (
        "# Policies on machines they never trained on: every latency profile side by side\n\n"
        f"Simulator, {args.split} traces. Under each profile the rules are re-tuned on validation "
        "traces there (TCP, the HF heuristic, AdaEDL, the SpecDec++-style rule; with the best static "
        "setting in hindsight, the best of them is the best rule), and every controller sees the same "
        f"acceptance draws. Each cell: the median over seeds {args.seeds} (`alone`: {alone_seeds}; "
        "`carried / alone`: the seeds of both, paired), [min, max]. `carried`: trained over the "
        f"latency family (`python {shlex.join(['experiments/train_ppo.py', *train])}`), which holds out "
        f"{', '.join(sorted(held))}; `alone`: trained on that profile alone; `{PRICED}`: the k the "
        "machine's prices make fastest at the recent acceptance (`specrl.controllers.priced`, the "
        "feature `priced_k`), a rule that needs no tuning: a teacher of the warm start, not a rule of "
        "the bar.\n\n"
        "## Prices (one row, context 256, as the features read them)\n\n"
        f"{page.price_table(known, args.profiles, held)}\n\n"
        f"## Summary\n\n{page.summary_table(rows, names, args.profiles)}\n\n"
        f"{page.overall_section(rows, names)}"
        f"## Every scenario\n\n{page.scenario_table(rows, args.seeds, alone_seeds, list(also))}\n\n"
        f"{page.choices_section(rows, [n for n in names if n != PRICED])}"
        f"{page_footer(command, started)}"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out / "profiles.md", text)
    record = {
        "command": command,
        "split": args.split,
        "seeds": args.seeds,
        "alone_seeds": alone_seeds,
        "held_out": sorted(held),
        "prices": {profile: prices(known[profile]) for profile in args.profiles},
        "curve_steps": {profile: curve_steps(known[profile]) for profile in args.profiles},
        "rows": [vars(row) for row in rows],
    }
    write_text_atomic(args.out / "profiles.json", json.dumps(record, indent=2))
    carried_medians = {(row.profile, row.scenario): statistics.median(row.ratios("carried")) for row in rows}
    bar_groups(
        args.out / "profiles.png",
        [s.name for s in scenarios],
        {p: [carried_medians[p, s.name] for s in scenarios] for p in args.profiles},
        "carried policy / best rule re-tuned there",
        f"{args.split.capitalize()} traces, simulator: the family-trained policy on each machine",
        reference=1.0,
    )
    measured = (
        f"The policy trained over the latency family (`{args.carried or 'trained here'}`) on every latency "
        f"profile side by side ({args.split} traces, simulator), against the rules re-tuned there and "
        f"policies trained on each profile alone; {', '.join(sorted(held))} held out of its training."
    )
    run = Run("Policies on machines they never trained on", measured, command, machine_clause("simulator"),
              ["profiles.md"], ["profiles.json"], ["profiles.png"])  # fmt: skip
    write_readme(args.out, run)
    print(text)


if __name__ == "__main__":
    main()
