"""Checkpoint selection in the simulator: the deterministic policy against every rule of the bar
on validation traces (never test traces: docs/design.md section 4b). A checkpoint is scored by
its *worst* ratio over the scenarios to each one's best rule, so a policy that wins on mixed
traffic and loses on code is not kept over one that never loses. A run over a family of machines
is scored under several profiles: every scenario under every profile is an entry,
``<scenario>@<profile>``, with the rules tuned under that profile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecNormalize

from specrl.envs import Scenario
from specrl.tables import markdown_table
from specrl.traces import TraceSet
from specrl.training.comparison import (
    BEST_STATIC,
    TCP,
    Bar,
    Comparison,
    Predict,
    best_rule_role,
    geometric_mean,
)


def policy_predict(model: PPO, normalizer: VecNormalize | None) -> Predict:
    """The model's deterministic actions, through the training normalisation of the observations."""
    if normalizer is None:
        return lambda observations: model.predict(observations, deterministic=True)[0]
    return lambda observations: model.predict(normalizer.normalize_obs(observations), deterministic=True)[0]


def entry_name(scenario: str, profile: str, footings: Mapping[str, Any]) -> str:
    """A scenario's entry under a profile: its name alone with one footing, else
    ``<scenario>@<profile>``."""
    return scenario if len(footings) == 1 else f"{scenario}@{profile}"


class PolicyVsRules:
    """A policy against the bar of each scenario on its validation ``traces``, under each footing
    (profile name -> :class:`Comparison`). The rules run once, here: ``rules`` and ``bars`` by
    entry (:func:`entry_name`); calling the object scores a policy."""

    def __init__(
        self,
        footings: Mapping[str, Comparison],
        scenarios: Sequence[Scenario],
        traces: dict[str, TraceSet],
    ):
        self.footings, self.scenarios, self.traces = dict(footings), list(scenarios), traces
        self.entries = {
            entry_name(s.name, profile, footings): (footing, s)
            for profile, footing in footings.items()
            for s in self.scenarios
        }
        self.rules: dict[str, dict[str, float]] = {}
        self.bars: dict[str, Bar] = {}
        for name, (footing, s) in self.entries.items():
            self.rules[name], self.bars[name] = footing.rules_on(s, traces[s.name])

    def best_rule(self, scenario: str) -> tuple[str, float]:
        """The role of the fastest rule of ``scenario`` (the best static setting included) and its
        tokens/s."""
        tokens = self.rules[scenario]
        role = best_rule_role(tokens)
        return role, tokens[role]

    def score(self, tokens_per_s: dict[str, float]) -> dict[str, Any]:
        """Scores of tokens/s per entry: ``worst_ratio_vs_best_rule`` (what selection maximises),
        ``ratio_vs_tcp`` (geometric mean) and TensorBoard ``scalars``."""
        vs_best = {name: value / self.best_rule(name)[1] for name, value in tokens_per_s.items()}
        vs_tcp = {name: value / self.rules[name][TCP] for name, value in tokens_per_s.items()}
        scalars = {f"{name}/tokens_per_s": value for name, value in tokens_per_s.items()}
        scalars.update({f"{name}/ratio_vs_best_rule": ratio for name, ratio in vs_best.items()})
        scalars.update({f"{name}/ratio_vs_tcp": ratio for name, ratio in vs_tcp.items()})
        return {
            "tokens_per_s": tokens_per_s,
            "worst_ratio_vs_best_rule": min(vs_best.values()),
            "ratio_vs_best_rule": vs_best,
            "ratio_vs_tcp": geometric_mean(vs_tcp.values()),
            "scalars": scalars,
        }

    def __call__(self, predict: Predict) -> dict[str, Any]:
        """:meth:`score` of the policy whose actions ``predict`` gives."""
        return self.score(
            {
                name: footing.policy_on(s, self.traces[s.name], predict)
                for name, (footing, s) in self.entries.items()
            }
        )


def part_entry(part: str) -> str:
    """The selection entry of a warm start's part: ``<scenario>/<domain>@<profile>`` ->
    ``<scenario>@<profile>``."""
    scenario, _, profile = part.partition("@")
    return scenario.split("/")[0] + (f"@{profile}" if profile else "")


def selection_section(selection: PolicyVsRules, kept: dict[str, Any], warm: dict[str, Any] | None) -> str:
    """The results page's section on checkpoint selection: per entry, the best rule on validation,
    the kept checkpoint's ratio to it and the rule a warm start cloned there; then whether the
    kept checkpoint beats the best rule everywhere."""
    lines = []
    for name, ratio in kept["ratio_vs_best_rule"].items():
        role, tokens = selection.best_rule(name)
        label = selection.bars[name].best_static.label() if role == BEST_STATIC else ""
        cloned = "-"
        if warm:  # an entry's teacher, or one per domain (<scenario>/<domain>[@<profile>])
            roles = [t["role"] for part, t in warm["teachers"].items() if part_entry(part) == name]
            cloned = ", ".join(dict.fromkeys(roles)) or "- (not trained on)"
        lines.append([name, f"{role} {label}".strip(), f"{tokens:.1f}", cloned, f"{ratio:.3f}"])
    table = markdown_table(
        ["scenario", "best rule on validation", "its tokens/s", "warm start clones", "kept / best rule"],
        lines,
    )
    start = "the warm start" if warm else "the random start"
    step = kept["timesteps"]
    which = f"{start} (step 0)" if step == 0 else f"the checkpoint of step {step:,}"
    worst = kept["worst_ratio_vs_best_rule"]
    verdict = (
        f"It beats the best rule of every scenario scored on validation (worst ratio {worst:.3f})."
        if worst >= 1.0
        else f"No checkpoint beats the best rule of every scenario scored on validation: the kept one "
        f"reaches {worst:.3f} of it where it does worst, so on such traffic a rule is as fast or faster."
    )
    return (
        "#### Checkpoint selection, validation traces (simulator)\n\n"
        f"Kept: {which}, the highest worst ratio to each scenario's best rule. {verdict}\n\n{table}\n"
    )
