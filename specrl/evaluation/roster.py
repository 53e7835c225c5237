"""The controllers a comparison runs, by name (the command line's spelling and the keys of its
JSON), and the episodes it runs them on. ``plain`` is k = 0; ``static:K[:TAU]`` the same (k, tau)
every step; ``tcp`` and ``tcp-tau0.25`` the seed's TCP-like heuristic without and with its cut;
``hf-heuristic`` and ``hf-confidence`` our versions of Hugging Face's rules; ``adaedl`` and
``specdec++`` the per-token stop rules, tuned per scenario on validation traces by the harness
(:func:`specrl.rule_tuning.tuned_rules`), so not built from a name alone. Every controller's k
is bounded by the scenario's ``k_max``.
"""

from __future__ import annotations

from dataclasses import dataclass

from specrl.controllers import (
    Controller,
    HFConfidenceController,
    HFHeuristicController,
    StaticController,
    TCPController,
)
from specrl.envs.scenario import Scenario

RULES = ("tcp", "tcp-tau0.25", "hf-heuristic", "hf-confidence")
TUNED_RULES = ("adaedl", "specdec++")
#: What each named rule is, for tables.
LABELS = {
    "plain": "plain (k=0)",
    "tcp": "TCP heuristic (tau=0)",
    "tcp-tau0.25": "TCP heuristic (tau=0.25)",
    "hf-heuristic": "HF heuristic schedule (ours)",
    "hf-confidence": "HF confidence threshold (ours)",
    "adaedl": "AdaEDL entropy stop (tuned on validation)",
    "specdec++": "SpecDec++-style stop (tuned on validation)",
}


class ControllerNameError(ValueError):
    """A controller name that is not in the roster; the message lists the valid spellings."""


def static_name(k: int, tau: float = 0.0) -> str:
    """The canonical name of a static setting: ``static:4:0.2`` (``plain`` for k = 0, tau = 0)."""
    return "plain" if k == 0 and tau == 0 else f"static:{k}:{tau:g}"


def parse_static(name: str) -> tuple[int, float]:
    """``static:K[:TAU]`` -> (K, TAU); ControllerNameError if malformed."""
    parts = name.split(":")[1:]
    try:
        if not 1 <= len(parts) <= 2:
            raise ValueError
        return int(parts[0]), float(parts[1]) if len(parts) > 1 else 0.0
    except ValueError:
        raise ControllerNameError(
            f"bad controller {name!r}: write static:K or static:K:TAU, e.g. static:4:0.3"
        ) from None


def make_controller(name: str, k_max: int) -> Controller:
    """A controller from its name (see the module doc), bounded by ``k_max``; ControllerNameError
    for an unknown name, a malformed static, or K outside 0..k_max."""
    if name == "plain":
        return StaticController(0)
    if name.startswith("static:"):
        k, tau = parse_static(name)
        if not 0 <= k <= k_max or not 0 <= tau <= 1:
            raise ControllerNameError(
                f"bad controller {name!r}: K must lie in 0..{k_max} (the scenario's k_max) and TAU in [0, 1]"
            )
        return StaticController(k, tau)
    initial_k = min(5, k_max)  # the seed's initial k, within the scenario's bound
    if name == "tcp":
        return TCPController(k_max=k_max, initial_k=initial_k)
    if name == "tcp-tau0.25":
        return TCPController.with_confidence_cut(0.25, k_max=k_max, initial_k=initial_k)
    if name == "hf-heuristic":
        return HFHeuristicController(k_max=k_max)
    if name == "hf-confidence":
        return HFConfidenceController(k_max=k_max)
    if name in TUNED_RULES:
        raise ControllerNameError(
            f"{name!r} is tuned per scenario on validation traces: run it through specrl evaluate "
            "(the harness tunes it in the simulator), or build it with specrl.rule_tuning.tuned_rules"
        )
    raise ControllerNameError(
        f"unknown controller {name!r}; choose plain, static:K[:TAU] or one of {', '.join(RULES)}"
    )


def label(name: str) -> str:
    """A readable label for a roster name."""
    if name.startswith("static:"):
        k, tau = parse_static(name)
        return f"static k={k}, tau={tau:g}"
    return LABELS.get(name, name)


@dataclass(frozen=True)
class Episode:
    """One evaluation episode, a prompt of the scenario's split: ``reset(seed=seed, options=options)``."""

    domain: str
    prompt_index: int
    seed: int

    @property
    def options(self) -> dict:
        return {"domain": self.domain, "prompt_index": self.prompt_index}


def episode_plan(
    scenario: Scenario, prompt_sets: dict[str, list[str]], per_domain: int, seed: int = 0
) -> list[Episode]:
    """The first ``per_domain`` prompts of each start domain (positive weight), in order.

    Episode i is reset with seed ``seed + i``: the same plan as
    :func:`specrl.envs.collect_traces` with ``prompts_per_domain=per_domain``, so a real-loop
    episode and the trace of the same index decode the same thing.
    """
    jobs = [
        (domain, index)
        for domain, weight in scenario.prompts.domains.items()
        if weight > 0
        for index in range(min(per_domain, len(prompt_sets[domain])))
    ]
    return [Episode(domain, index, seed + i) for i, (domain, index) in enumerate(jobs)]


def first_episodes(plan: list[Episode], count: int) -> list[Episode]:
    """The first ``count`` episodes of ``plan`` taken round robin over its domains (code#0, prose#0,
    math#0, code#1, ...), each keeping its seed."""
    domains = list(dict.fromkeys(e.domain for e in plan))
    return sorted(plan, key=lambda e: (e.prompt_index, domains.index(e.domain)))[:count]
