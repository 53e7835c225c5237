"""The page of ``experiments/profiles.py``: the profiles' prices, a summary per profile, every
policy seed over every cell, every scenario's ratios, and what each policy drafts with."""

from __future__ import annotations

import statistics

from profiles_parts.rows import PRICED, ProfileRow, curve_steps, prices
from specrl.latency import LatencyModel
from specrl.tables import markdown_table
from specrl.training.comparison import geometric_mean

WHAT = ("worst scenario (median over seeds)", "on mixed")


def spread(values: list[float]) -> str:
    """The median of ``values`` and their [min, max]."""
    return f"{statistics.median(values):.3f} [{min(values):.3f}, {max(values):.3f}]"


def mixed_of(names: list[str]) -> str:
    """The scenario the summary's "on mixed" column reads: ``mixed``, else the first ``mixed*``."""
    return "mixed" if "mixed" in names else next((n for n in names if n.startswith("mixed")), "mixed")


def price_table(known: dict[str, LatencyModel], profiles: list[str], held: set[str]) -> str:
    """Each profile's prices as the features read them (one row, context 256)."""
    header = ["profile", "held out of training", "draft_price", "verify_token_price"]
    header += ["each token's step, 2nd..9th (/ one token)", "plain tokens/s"]
    lines = [
        [
            profile,
            "yes" if profile in held else "no",
            *(f"{value:.3f}" for value in prices(known[profile])),
            " ".join(f"{step:.2f}" for step in curve_steps(known[profile])),
            f"{known[profile].plain_tokens_per_s:.1f}",
        ]
        for profile in profiles
    ]
    return markdown_table(header, lines)


def summary_cells(rows: list[ProfileRow], names: list[str]) -> list[str]:
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


def summary_table(rows: list[ProfileRow], names: list[str], profiles: list[str]) -> str:
    summary = [[p, *summary_cells([r for r in rows if r.profile == p], names)] for p in profiles]
    return markdown_table(["profile"] + [f"{name}: {what}" for name in names for what in WHAT], summary)


def overall_section(rows: list[ProfileRow], names: list[str]) -> str:
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


def scenario_table(rows: list[ProfileRow], seeds: list[int], alone_seeds: list[int], also: list[str]) -> str:
    """Every scenario under every profile: the best rule, then each policy's ratio to it."""
    lines = []
    for row in rows:
        cells = [
            row.profile,
            row.scenario,
            f"{row.best_role} {row.best_rule:.1f}",
            spread(row.ratios("carried")),
        ]
        if "alone" in row.policies:
            carried_at = dict(zip(seeds, row.policies["carried"], strict=True))
            alone_at = dict(zip(alone_seeds, row.policies["alone"], strict=True))
            price = [carried_at[seed] / alone_at[seed] for seed in alone_seeds if seed in carried_at]
            cells += [spread(row.ratios("alone")), spread(price)]
        else:
            cells += ["-", "-"]
        cells += [f"{row.ratios(name)[0]:.3f}" for name in (PRICED, *also)]
        lines.append(cells)
    header = ["profile", "scenario", "best rule (tokens/s)", "carried / best rule", "alone / best rule"]
    header += ["carried / alone", *(f"{name} / best rule" for name in (PRICED, *also))]
    return markdown_table(header, lines)


def choices_section(rows: list[ProfileRow], names: list[str]) -> str:
    """What each policy's first seed drafts with, per profile and scenario: the share of its steps
    that were plain and that drafted with each drafter (with one drafter, the plain share alone),
    and its mean k; beside the best static setting in hindsight there."""
    pool = any(set(row.choices.get(names[0], {})) - {"plain", "draft", "mean_k"} for row in rows)

    def cell(choice: dict[str, float] | None) -> str:
        if choice is None:
            return "-"
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
