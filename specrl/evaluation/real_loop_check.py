"""A trained policy against the bar in the real loop (wall clock) on test prompts: the check,
after ``specrl train``'s comparison on test traces (:mod:`specrl.training.comparison`), that the
simulator's ranking holds on the machine. Every role of the scenario's
:class:`~specrl.training.comparison.Bar` and the policy run through the harness's real loop
(:func:`specrl.evaluation.harness.run_real_loop`) after one untimed pass of plain decoding;
tokens/s is the median over repeats, PPO's ratios are paired, each with its 95% interval.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from specrl.controllers import LearnedController
from specrl.envs import Scenario, SpecDecodeEnv, cached_traces, load_scenario
from specrl.evaluation.compare import paired_ratios
from specrl.evaluation.harness import Settings, run_real_loop
from specrl.evaluation.intervals import RatioInterval, paired_ratio_interval
from specrl.evaluation.roster import episode_plan
from specrl.evaluation.runs import aggregate
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.tables import markdown_table
from specrl.training.comparison import (
    BEST_STATIC,
    PLAIN,
    PPO,
    ROLES,
    TCP,
    Bar,
    Comparison,
    SimulatorRow,
    StaticSetting,
    best_rule_role,
)


@dataclass
class RealLoopRow:
    """One scenario in the real loop: the median tokens/s by role, PPO's paired ratio to each role
    and its 95% interval, the best static setting that ran, and each role's tokens/s per repeat."""

    tokens_per_s: dict[str, float]
    paired: dict[str, float]
    best_static: StaticSetting
    intervals: dict[str, RatioInterval]
    repeats: dict[str, list[float]]

    def best_rule(self) -> str:
        """The role of the fastest rule that ran (:func:`~specrl.training.comparison.best_rule_role`)."""
        return best_rule_role(self.tokens_per_s)

    def to_best_rule(self, name: str) -> RatioInterval:
        """The paired ratio of ``name`` (a policy run alongside) to the best rule, with its interval:
        what PPO's own column says, for another policy of the same run (another seed, say)."""
        return paired_ratio_interval(self.repeats[name], self.repeats[self.best_rule()])


def in_real_loop(
    scenario: Scenario,
    pair: ModelPair,
    latency: LatencyModel,
    bar: Bar,
    policy: LearnedController,
    *,
    prompts: int,
    repeats: int,
    seed: int,
    versus: Mapping[str, LearnedController] | None = None,
) -> RealLoopRow:
    """The scenario's bar and ``policy`` in the real loop on its first ``prompts`` test prompts per
    domain (:func:`~specrl.evaluation.roster.episode_plan`), ``repeats`` times; ``versus``: other
    policies by name, run alongside (the paired ratios then include the policy's to each)."""
    env = SpecDecodeEnv(scenario, pair=pair, split="test", time="wallclock", latency=latency)
    controllers = {**bar.rules(scenario), BEST_STATIC: bar.best_static.controller(), PPO: policy}
    extra = dict(versus or {})
    if set(extra) & set(controllers):
        raise ValueError(
            f"the names of the policies compared {sorted(extra)} must differ from the bar's roles"
        )
    controllers.update(extra)
    factories = {role: (lambda controller=controller: controller) for role, controller in controllers.items()}
    episodes = episode_plan(scenario, env.prompt_sets, prompts, seed)
    settings = Settings(repeats=repeats, warmup=1, warmup_rows=(PLAIN,), hf=False, seed=seed)
    records, _ = run_real_loop(env, episodes, factories, None, settings)
    rows = {role: aggregate(records[role]) for role in (*ROLES, *extra) if role in records}
    per_repeat = {role: row["tokens_per_s_repeats"] for role, row in rows.items()}
    return RealLoopRow(
        {role: row["tokens_per_s"] for role, row in rows.items()},
        paired_ratios(per_repeat, PPO),
        bar.best_static,
        {role: paired_ratio_interval(per_repeat[PPO], values) for role, values in per_repeat.items()},
        per_repeat,
    )


def check_scenarios(
    names: Sequence[str],
    comparison: Comparison,
    rows: Mapping[str, SimulatorRow],
    policy: LearnedController,
    *,
    preset: str | None,
    prompts: int,
    repeats: int,
    seed: int,
    versus: Mapping[str, LearnedController] | None = None,
) -> dict[str, RealLoopRow]:
    """:func:`in_real_loop` of the scenarios ``names`` (on ``preset``'s pair), each against the bar
    of its row of the simulator comparison (``rows``), or one computed now on its test traces."""
    result = {}
    for name in names:
        scenario = load_scenario(name).with_overrides(preset=preset)
        if name in rows:
            bar = rows[name].bar
        else:
            modeled = scenario.with_overrides(time="modeled")
            bar = comparison.bar(modeled, cached_traces(modeled, "test", comparison.pair), scenario.tau_grid)
        result[name] = in_real_loop(
            scenario,
            comparison.pair,
            comparison.latency,
            bar,
            policy,
            prompts=prompts,
            repeats=repeats,
            seed=seed,
            versus=versus,
        )
    return result


def real_loop_table(rows: dict[str, RealLoopRow]) -> str:
    """Markdown: per scenario, the median tokens/s of every rule ("-" where it did not run), the
    best static setting and PPO, then PPO's paired ratios to plain, TCP, the best static setting
    and the best rule (named)."""
    present = {role for row in rows.values() for role in row.tokens_per_s}
    rules = [role for role in ROLES if role in present and role not in (BEST_STATIC, PPO)]
    lines = []
    for scenario, row in rows.items():
        tokens, paired, best_rule = row.tokens_per_s, row.paired, row.best_rule()
        cells = [f"{tokens[role]:.1f}" if role in tokens else "-" for role in rules] + [
            f"{tokens[BEST_STATIC]:.1f} {row.best_static.label()}",
            f"{tokens[PPO]:.1f}",
            f"{paired[PLAIN]:.3f}",
            f"{paired[TCP]:.3f}",
            f"{paired[BEST_STATIC]:.3f}",
            f"{paired[best_rule]:.3f} ({best_rule})",
            f"{row.intervals[best_rule].interval()} n={row.intervals[best_rule].n}",
        ]
        lines.append([scenario, *cells])
    header = ["scenario", *rules, "best static", "PPO"]
    header += ["PPO / plain", "PPO / TCP", "PPO / best static", "PPO / best rule (which)", "its 95% interval"]
    return markdown_table(header, lines)


def versus_table(rows: dict[str, RealLoopRow], versus: Sequence[str]) -> str:
    """Markdown: per scenario and policy run alongside, both medians, PPO's paired ratio to it and
    its own paired ratio to the best rule."""
    lines = [
        [
            scenario,
            name,
            f"{row.tokens_per_s[PPO]:.1f}",
            f"{row.tokens_per_s[name]:.1f}",
            row.intervals[name].cell(),
            f"{row.to_best_rule(name).cell()} ({row.best_rule()})",
        ]
        for scenario, row in rows.items()
        for name in versus
    ]
    header = ["scenario", "policy alongside", "PPO", "it", "PPO / it [95% interval] n"]
    header += ["it / best rule [95% interval] n"]
    return markdown_table(header, lines)


def real_loop_section(
    rows: dict[str, RealLoopRow], prompts: int, repeats: int, versus: Sequence[str] = ()
) -> str:
    """The results page's section of the real loop: heading, protocol, tables."""
    alongside = (
        f"\nAgainst the policies run alongside it (the same prompts, order and pairing):\n\n"
        f"{versus_table(rows, versus)}\n"
        if versus
        else ""
    )
    return (
        f"\n#### Real loop on test prompts (wall clock), tokens/s\n\n{prompts} test "
        f"prompts per domain, every controller on each in a random order, {repeats} "
        "repeats; tokens/s: the median over repeats; PPO's ratios: the median over repeats of the "
        f"ratio within a repeat (paired, so drift of the machine between repeats cancels); its 95% "
        "interval: the t interval over the n repeats of PPO's ratio to the best rule (one that holds 1 "
        "is a tie).\n\n"
        f"{real_loop_table(rows)}\n{alongside}"
    )
