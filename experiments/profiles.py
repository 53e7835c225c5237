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
- ``--also NAME=FOLDER``: other exported policies, on every profile (``previous``: the default
  shipped before the family, trained on this machine's prices, kept in
  ``results/profiles/previous_default``).

Each trained run keeps ``policy.pt2``, ``metadata.json`` and ``results.md`` under
``<out>/runs/<arm>/seed<N>/``; a run kept there is not run again (an interrupted call resumes).
Writes ``<out>/profiles.{json,md,png}``.

``--train="FLAGS"`` adds flags to every trained arm's ``train_ppo.py`` (the pool's scenarios, say;
with ``=``, since they begin with ``--``), and ``--scenarios`` names the scenarios compared.
``--split validation`` compares on validation traces instead: to choose between policies under a
profile held out of their training (a validation machine) without looking at the test traces.

    python experiments/profiles.py --carried specrl/policies/default --seeds 0 1 2 --alone-seeds 0 1 \\
        --also v4=results/profiles/v4/seed0 previous=results/profiles/previous_default
    python experiments/profiles.py --carried specrl/policies/pool --seeds 0 1 2 --alone-seeds 0 \\
        --scenarios mixed_pool code_pool prose_pool math_pool --out results/profiles/pool \\
        --also previous=results/profiles/previous_pool warm-start=results/profiles/pool/warm_start \\
        --train="--scenarios mixed_pool --select-scenarios code_pool prose_pool math_pool \\
        --eval-scenarios code_pool prose_pool math_pool --no-stop --no-warm-start"
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from specrl.envs import ScenarioError, cached_traces
from specrl.evaluation.profiles import PRICED, curve_steps, prices, profile_row, rule_predictor_of
from specrl.export import load_policy
from specrl.io import write_text_atomic
from specrl.latency import HELD_OUT
from specrl.latency.family import profiles as latency_profiles
from specrl.plots import bar_groups
from specrl.tables import markdown_table
from specrl.training.comparison import geometric_mean
from specrl.training.inputs import (
    DEFAULT_EVAL_SCENARIOS,
    DEFAULT_SCENARIOS,
    SELECT_PROFILES,
    load_scenarios,
    named_policies,
)
from specrl.training.kept_runs import kept_run, page_footer

REPO = Path(__file__).resolve().parent.parent
KEPT = ("policy.pt2", "metadata.json", "results.md")


def trained(arm: str, seed: int, out: Path, flags: list[str]) -> Path:
    """The folder of the arm's policy for ``seed``, trained now unless kept already."""
    return kept_run(arm, seed, out / "runs" / arm / f"seed{seed}", flags, KEPT)


def choices_section(rows: list, names: list[str]) -> str:
    """What each policy's first seed drafts with, per profile and scenario: the share of its steps
    that were plain and that drafted with each drafter (with one drafter, the plain share alone),
    and its mean k; beside the best static setting in hindsight there."""
    pool = any(set(row.choices.get(names[0], {})) - {"plain", "draft", "mean_k"} for row in rows)

    def cell(choice: dict[str, float]) -> str:
        shown = [n for n in choice if n != "mean_k" and (pool or n == "plain")]
        shares = ", ".join(f"{name} {choice[name]:.2f}" for name in shown) or "plain 0.00"
        return f"{shares}; k {choice['mean_k']:.1f}"

    lines = [
        [
            row.profile,
            row.scenario,
            row.best_static,
            *(cell(row.choices[n]) if n in row.choices else "-" for n in names),
        ]
        for row in rows
    ]
    return (
        "## What each policy drafts with\n\n"
        "The first seed of each policy: the share of its steps that were plain (k = 0)"
        f"{' and that drafted with each drafter' if pool else ''}, and its mean k over every step; "
        "beside it the best static setting in hindsight on the same traces.\n\n"
        f"{markdown_table(['profile', 'scenario', 'best static', *names], lines)}\n\n"
    )


def mixed_of(names: list[str]) -> str:
    """The scenario the summary's "on mixed" column reads: ``mixed``, else the first ``mixed*``."""
    return "mixed" if "mixed" in names else next((n for n in names if n.startswith("mixed")), "mixed")


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


WHAT = ("worst scenario (median over seeds)", "on mixed")


def summary_cells(rows: list, names: list[str]) -> list[str]:
    """Per policy: its worst scenario's median ratio to the best rule, and its ratio on mixed."""
    cells = []
    mixed_name = mixed_of([row.scenario for row in rows])
    for name in names:
        mine = [row for row in rows if name in row.policies]
        if not mine:
            cells += ["-", "-"]
            continue
        worst = min(mine, key=lambda row: statistics.median(row.ratios(name)))
        mixed = next((row for row in mine if row.scenario == mixed_name), None)
        cells += [
            f"{statistics.median(worst.ratios(name)):.3f} ({worst.scenario})",
            "-" if mixed is None else spread(mixed.ratios(name)),
        ]
    return cells


def overall_section(rows: list, names: list[str]) -> str:
    """Per policy and seed, over every (profile, scenario) cell of the page: the worst ratio to the
    best rule and the geometric mean of the ratios (what one number per seed says of a policy
    across machines; choosing between policies under validation machines reads it)."""
    lines = []
    for name in names:
        mine = [row for row in rows if name in row.policies]
        if not mine:
            continue
        for seed in range(len(mine[0].policies[name])):
            ratios = [row.ratios(name)[seed] for row in mine]
            lines.append([name, seed, f"{min(ratios):.3f}", f"{geometric_mean(ratios):.3f}", len(ratios)])
    return (
        "## Over every profile and scenario\n\n"
        "Each policy's seeds in the order given (`--also` policies: one): the worst ratio to the best "
        "rule over every cell of the page, and the geometric mean of those ratios.\n\n"
        f"{markdown_table(['policy', 'seed', 'worst', 'geometric mean', 'cells'], lines)}\n\n"
    )


def main() -> None:
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
    parser.add_argument("--out", type=Path, default=REPO / "results" / "profiles")
    args = parser.parse_args()
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
    alone = {
        profile: {
            seed: trained(
                f"alone-{profile}",
                seed,
                args.out,
                [*train, "--latency-profiles", profile, "--perturbations", "0"],
            )
            for seed in alone_seeds
        }
        for profile in args.alone
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
        rows.append(
            profile_row(
                pair,
                profile,
                known[profile],
                scenario,
                policies,
                repeats=args.repeats,
                rule_predictor=rule_predictor,
                split=args.split,
            )
        )

    # 3. The page: prices, then every scenario's ratios per profile, the worst and the mixed one.
    # what the carried policy never trained on (its metadata's family; the shipped family holds out HELD_OUT)
    trained_over = carried_policies[0].metadata.get("latency_profiles", {}).get("profiles")
    held = set(HELD_OUT) if trained_over is None else set(known) - set(trained_over)
    price_table = markdown_table(
        [
            "profile",
            "held out of training",
            "draft_price",
            "verify_token_price",
            "each token's step, 2nd..9th (/ one token)",
            "plain tokens/s",
        ],
        [
            [
                profile,
                "yes" if profile in held else "no",
                *(f"{value:.3f}" for value in prices(known[profile])),
                " ".join(f"{step:.2f}" for step in curve_steps(known[profile])),
                f"{known[profile].plain_tokens_per_s:.1f}",
            ]
            for profile in args.profiles
        ],
    )
    lines = []
    for row in rows:
        cells = [
            row.profile,
            row.scenario,
            f"{row.best_role} {row.best_rule:.1f}",
            spread(row.ratios("carried")),
        ]
        if "alone" in row.policies:
            carried_at = dict(zip(args.seeds, row.policies["carried"], strict=True))
            alone_at = dict(zip(alone_seeds, row.policies["alone"], strict=True))
            price = [carried_at[seed] / alone_at[seed] for seed in alone_seeds if seed in carried_at]
            cells += [spread(row.ratios("alone")), spread(price)]
        else:
            cells += ["-", "-"]
        cells += [f"{row.ratios(name)[0]:.3f}" for name in (PRICED, *also)]
        lines.append(cells)
    header = ["profile", "scenario", "best rule (tokens/s)", "carried / best rule", "alone / best rule"]
    header += ["carried / alone", *(f"{name} / best rule" for name in (PRICED, *also))]
    table = markdown_table(header, lines)
    names = ["carried", "alone", PRICED, *also]
    summary = [[p, *summary_cells([r for r in rows if r.profile == p], names)] for p in args.profiles]
    header = ["profile"] + [f"{name}: {what}" for name in names for what in WHAT]
    summary_table = markdown_table(header, summary)
    command = "python " + shlex.join(sys.argv)
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
        f"{price_table}\n\n## Summary\n\n{summary_table}\n\n{overall_section(rows, names)}"
        f"## Every scenario\n\n{table}\n\n"
        f"{choices_section(rows, [n for n in names if n != PRICED])}"
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
        "rows": [
            {
                "profile": row.profile,
                "scenario": row.scenario,
                "plain": row.plain,
                "best_role": row.best_role,
                "best_rule": row.best_rule,
                "policies": row.policies,
                "choices": row.choices,
                "best_static": row.best_static,
            }
            for row in rows
        ],
    }
    write_text_atomic(args.out / "profiles.json", json.dumps(record, indent=2))
    names = [s.name for s in scenarios]
    bar_groups(
        args.out / "profiles.png",
        names,
        {
            profile: [
                statistics.median(
                    next(r for r in rows if r.profile == profile and r.scenario == n).ratios("carried")
                )
                for n in names
            ]
            for profile in args.profiles
        },
        "carried policy / best rule re-tuned there",
        f"{args.split.capitalize()} traces, simulator: the family-trained policy on each machine",
        reference=1.0,
    )
    print(text)


if __name__ == "__main__":
    main()
