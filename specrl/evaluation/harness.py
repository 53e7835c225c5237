"""One scenario, every controller, side by side: the simulator columns, then the real loop.

Everything runs on one prompt split, ``Settings.split``: ``test`` by default (docs/design.md section
4b: reported once, nothing selected on it; the best static and the oracle are bounds in
hindsight), or ``validation`` for tuning. Per scenario (:func:`evaluate_scenario`):

1. Simulator (modeled time, unless turned off): every controller replayed on the split's traces
   (:func:`specrl.trace_evaluation.play_traces`), the clairvoyant oracle and the whole static
   (k, tau) grid (:mod:`specrl.oracle`), whose best setting becomes the "best static in
   hindsight" row. Trace i is reset with seed ``seed + i``, the draws of the bounds.
2. Real loop (the env's time, wall clock by default): the roster, that best static setting and
   Hugging Face ``generate`` (plain and assisted) on the split's first prompts, interleaved
   (:func:`run_interleaved`).
3. Ratios: speed-up over plain decoding (ours; HF rows over HF's plain ``generate``, timed the
   same way) and ratio to the TCP heuristic (tau = 0), in both columns.

Without the simulator the best static is the best of the statics run in the real loop (plain
included), in hindsight on the same measurements; the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from specrl.controllers import LearnedController
from specrl.controllers.base import Controller
from specrl.envs.recording import cached_traces
from specrl.envs.scenario import Scenario
from specrl.envs.spec_decode import SpecDecodeEnv
from specrl.evaluation import roster
from specrl.evaluation.compare import by_player, compare, shuffled
from specrl.evaluation.runs import aggregate, hf_episode, trajectory
from specrl.hf_assisted import (
    assistant_config,
    confidence_threshold_variant,
    resolved_assistant_settings,
)
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.oracle import best_static, clairvoyant_bound
from specrl.rule_tuning import rule_predictor, tuned_rules
from specrl.trace_evaluation import EpisodeRecord, StepRecorder, play, play_traces
from specrl.traces import TraceSet

PLAIN, TCP, BEST_STATIC, ORACLE = "plain", "tcp", "best-static", "oracle"
HF_PLAIN, HF_ASSISTED = "hf-generate", "hf-generate-assisted"


@dataclass
class Settings:
    """What :func:`evaluate_scenario` runs (``specrl evaluate --help`` documents each option).

    ``episodes`` real-loop episodes are the first prompts of ``split`` round robin over the start
    domains; the simulator replays ``sim_prompts_per_domain`` traces per start domain (raised to
    cover the episodes). ``warmup`` untimed passes over the first episode come first, of every
    row or of ``warmup_rows`` (one row warms the shared caches and kernels). ``tuned`` rules run
    only with the simulator; ``time`` is the real loop's ("wallclock" or "modeled"); episode i
    resets with seed ``seed + i``, which also seeds the run order.
    """

    episodes: int = 1
    sim_prompts_per_domain: int = 4
    split: str = "test"
    repeats: int = 3
    warmup: int = 1
    warmup_rows: tuple[str, ...] | None = None
    statics: tuple[str, ...] = ("static:2:0", "static:4:0")
    rules: tuple[str, ...] = roster.RULES
    tuned: tuple[str, ...] = roster.TUNED_RULES
    hf: bool = True
    time: str = "wallclock"
    seed: int = 0
    progress: bool = True


#: Plays the real-loop rows: (env, episodes, factories, best static, settings) -> (records, HF settings).
RealLoop = Callable[..., tuple[dict[str, list[list[EpisodeRecord]]], dict[str, Any] | None]]


def hf_assistant(pair: ModelPair, k_max: int) -> tuple[Any, dict[str, Any]]:
    """HF's assisted generation with its dynamic confidence threshold (our ``hf-confidence``'s
    counterpart): ``num_assistant_tokens = k_max``, schedule "constant", HF's default threshold."""
    config = assistant_config(
        pair.draft.generation_config, num_assistant_tokens=k_max, num_assistant_tokens_schedule="constant"
    )
    settings = resolved_assistant_settings(config)
    return config, settings | {"confidence_threshold": confidence_threshold_variant()}


def controller_factories(
    scenario: Scenario, settings: Settings, policies: dict[str, LearnedController]
) -> dict[str, Callable[[], Controller]]:
    """Roster name -> a function that makes a fresh controller for this scenario."""
    names = [PLAIN, *(n for n in settings.statics if n != PLAIN), *settings.rules]
    factories: dict[str, Callable[[], Controller]] = {
        name: (lambda name=name: roster.make_controller(name, scenario.k_max)) for name in names
    }
    for name, policy in policies.items():
        factories[name] = lambda policy=policy: policy  # stateless: one instance serves every run
    return factories


def tuned_factories(
    scenario: Scenario, pair: ModelPair, latency: LatencyModel, names: tuple[str, ...]
) -> tuple[dict[str, Callable[[], Controller]], dict[str, Any]]:
    """Factories of the per-token stop rules ``names``, tuned on validation traces, and their
    settings (for the report). A tuned controller serves every run: each episode resets it."""
    tuned = tuned_rules(scenario, pair, latency, rule_predictor(scenario, pair))
    factories = {name: (lambda c=tuned[name].controller: c) for name in names if name in tuned}
    return factories, {name: tuned[name].setting for name in factories}


def evaluate_scenario(
    scenario: Scenario,
    pair: ModelPair,
    latency: LatencyModel,
    settings: Settings,
    policies: dict[str, LearnedController],
    no_sim: str | None = None,
    real_loop: RealLoop | None = None,
) -> dict[str, Any]:
    """One scenario's comparison (see the module doc) as its JSON-ready result; ``no_sim``: why
    the simulator columns are left out, or None. ``real_loop`` plays the real-loop rows (default
    :func:`run_real_loop`, here; :meth:`specrl.distributed.RayPool.real_loop` shards it)."""
    scenario = scenario.with_overrides(split=settings.split)
    factories = controller_factories(scenario, settings, policies)
    skipped = {
        name: f"the policy picks k up to {p.k_max}, scenario '{scenario.name}' allows {scenario.k_max}"
        for name, p in policies.items()
        if p.k_max > scenario.k_max
    }
    for name in skipped:
        del factories[name]
    env = SpecDecodeEnv(scenario, pair=pair, time=settings.time, latency=latency)
    start_domains = [d for d, weight in scenario.prompts.domains.items() if weight > 0]
    per_domain = max(settings.sim_prompts_per_domain, math.ceil(settings.episodes / len(start_domains)))
    plan = roster.episode_plan(scenario, env.prompt_sets, per_domain, settings.seed)
    episodes = roster.first_episodes(plan, settings.episodes)

    tuned_settings: dict[str, Any] = {}
    if no_sim is None and settings.tuned:
        tuned, tuned_settings = tuned_factories(scenario, pair, latency, settings.tuned)
        learned = {name: make for name, make in factories.items() if name in policies}
        factories = {name: make for name, make in factories.items() if name not in policies} | tuned | learned
    bounds, sim_records = None, {}
    if no_sim is None:
        bounds, sim_records = run_simulator(scenario, pair, latency, factories, per_domain, settings)
    best_from_sim = (
        roster.static_name(bounds["best_static"]["k"], bounds["best_static"]["tau"]) if bounds else None
    )
    real, hf_settings = (real_loop or run_real_loop)(env, episodes, factories, best_from_sim, settings)

    real_rows = {
        name: aggregate(repeats, "hf" if name in (HF_PLAIN, HF_ASSISTED) else "ours")
        for name, repeats in real.items()
    }
    # Without a simulator: the best of the statics measured in the real loop, in hindsight.
    best_name = best_from_sim or max(
        (n for n in real_rows if n == PLAIN or n.startswith("static:")),
        key=lambda n: real_rows[n]["tokens_per_s"],
    )
    sim_rows = {name: aggregate([records]) for name, records in sim_records.items()}
    rows = build_rows(real_rows, sim_rows, bounds, best_name, list(factories), policies)
    add_ratios(rows, settings.time)
    result = {
        "name": scenario.name,
        "description": scenario.description,
        "temperature": scenario.sampling.temperature,
        "k_max": scenario.k_max,
        "tau_grid": list(scenario.tau_grid),
        "max_new_tokens": scenario.max_new_tokens,
        "shift": [{"after_tokens": s.after_tokens, "domain": s.domain} for s in scenario.shift],
        "real_time": settings.time,
        "split": settings.split,
        "episodes": [{"domain": e.domain, "prompt_index": e.prompt_index, "seed": e.seed} for e in episodes],
        "simulator": simulator_summary(no_sim, bounds, len(sim_records.get(PLAIN, []))),
        "hf_assistant": hf_settings,
        "tuned_rules": tuned_settings,
        "rows": rows,
        "skipped": skipped,
        "trajectories": {
            name: trajectory(repeats[0][0])
            for name, repeats in real.items()
            if scenario.shift and repeats[0][0].steps
        },
    }
    return result


def run_simulator(
    scenario: Scenario,
    pair: ModelPair,
    latency: LatencyModel,
    factories: dict[str, Callable[[], Controller]],
    per_domain: int,
    settings: Settings,
) -> tuple[dict[str, Any], dict[str, list[EpisodeRecord]]]:
    """The bounds, then every controller (and the best static setting) on the split's traces:
    the first ``per_domain`` prompts of each start domain, trace i recorded and replayed with seed
    ``seed + i`` (the real-loop episodes of :func:`~specrl.evaluation.roster.episode_plan` are
    among them)."""
    traces = cached_traces(
        scenario,
        scenario.prompts.split,
        pair,
        prompts_per_domain=per_domain,
        seed=settings.seed,
        progress=settings.progress,
    )
    found = simulator_bounds(scenario, traces, latency, settings.seed)
    best = roster.static_name(found["best_static"]["k"], found["best_static"]["tau"])
    factories = {best: lambda: roster.make_controller(best, scenario.k_max)} | factories
    return found, {
        name: play_traces(make(), scenario, traces, latency, seed=settings.seed, steps=True)
        for name, make in factories.items()
    }


def simulator_bounds(
    scenario: Scenario, traces: TraceSet, latency: LatencyModel, seed: int
) -> dict[str, Any]:
    """The clairvoyant oracle over all traces, and the static grid with its best setting, on the
    acceptance draws :func:`~specrl.trace_evaluation.play_traces` gives a controller with ``seed``
    (one realisation per trace), so the oracle bounds each controller trace by trace."""
    drafters, rows = scenario.drafters, scenario.batch.shared_by
    oracle = clairvoyant_bound(traces, latency, count=1, seed=seed, drafters=drafters, rows=rows)
    best = best_static(traces, latency, scenario.tau_grid, count=1, seed=seed, drafters=drafters, rows=rows)
    pool = len(scenario.drafters) > 1  # a drafter is named where there was a choice
    setting = {"k": int(best.k), "tau": float(best.tau), "tokens_per_s": float(best.tokens_per_s)}
    return {
        "oracle": {"tokens": oracle.tokens, "seconds": oracle.seconds, "tokens_per_s": oracle.tokens_per_s},
        "best_static": setting | ({"drafter": best.drafter} if pool else {}),
        "static_grid": [
            {"k": int(k), "tau": float(tau), "tokens_per_s": float(value)} | ({"drafter": d} if pool else {})
            for (k, tau, d), value in sorted(best.table.items())
        ],
    }


def run_real_loop(
    env: SpecDecodeEnv,
    episodes: list[roster.Episode],
    factories: dict[str, Callable[[], Controller]],
    best_static: str | None,
    settings: Settings,
) -> tuple[dict[str, list[list[EpisodeRecord]]], dict[str, Any] | None]:
    """Every controller (and ``best_static``), then HF generate, interleaved on the episodes."""
    scenario, pair = env.scenario, env.pair
    if best_static is not None:
        factories = {best_static: lambda: roster.make_controller(best_static, scenario.k_max)} | factories
    recorder = StepRecorder(env)
    controllers = {name: make() for name, make in factories.items()}
    runners: dict[str, Callable[[roster.Episode], EpisodeRecord]] = {
        name: (lambda e, controller=controller: play(recorder, controller, e.seed, e.options))
        for name, controller in controllers.items()
    }
    hf_settings = None
    if settings.hf:
        assistant, hf_settings = hf_assistant(pair, scenario.k_max)
        runners[HF_PLAIN] = lambda e: hf_episode(pair, scenario, env.prompt_sets, e, None)
        runners[HF_ASSISTED] = lambda e: hf_episode(pair, scenario, env.prompt_sets, e, assistant)
    return run_interleaved(runners, episodes, settings, scenario.name), hf_settings


def run_interleaved(
    runners: dict[str, Callable[[roster.Episode], EpisodeRecord]],
    plan: list[roster.Episode],
    settings: Settings,
    name: str,
) -> dict[str, list[list[EpisodeRecord]]]:
    """:func:`~specrl.evaluation.compare.compare` of the rows, shuffled (seeded) per episode, each
    on the episode's seed, after the warm-up; returns row -> repeat -> episodes."""
    warmed = len(runners) if settings.warmup_rows is None else len(settings.warmup_rows)
    total = warmed * settings.warmup + len(runners) * settings.repeats * len(plan)
    with tqdm(
        total=total, desc=f"{name} real loop", unit="ep", disable=not settings.progress, dynamic_ncols=True
    ) as bar:
        trials = compare(
            {row: (lambda episode, seed, run=run: run(episode)) for row, run in runners.items()},
            plan,
            settings.repeats,
            order=shuffled(settings.seed),
            warmup=settings.warmup,
            warmup_players=settings.warmup_rows,
            on_trial=lambda trial: bar.update(),
        )
    return by_player(trials, list(runners))


def build_rows(
    real_rows: dict[str, dict],
    sim_rows: dict[str, dict],
    bounds: dict | None,
    best_name: str,
    names: list[str],
    policies: dict[str, LearnedController],
) -> dict[str, dict[str, Any]]:
    """The table rows in order: plain, statics, best static, rules, learned, HF, oracle (a static
    that ran only as the best in hindsight appears once, as ``best-static``)."""

    def row(name: str, kind: str, label: str, **extra: Any) -> dict[str, Any]:
        return {"label": label, "kind": kind, "real": real_rows.get(name), "sim": sim_rows.get(name), **extra}

    rows: dict[str, dict[str, Any]] = {}
    for name in names:
        if name == PLAIN:
            rows[name] = row(name, "plain", roster.label(name))
        elif name.startswith("static:"):
            rows[name] = row(name, "static", roster.label(name))
    k, tau = (0, 0.0) if best_name == PLAIN else roster.parse_static(best_name)
    chosen_by = "the simulator, over the whole grid" if bounds else "hindsight over the real-loop statics"
    rows[BEST_STATIC] = row(
        best_name,
        "best-static",
        f"best static in hindsight (k={k}, tau={tau:g})",
        setting={"k": k, "tau": tau, "name": best_name, "chosen_by": chosen_by},
    )
    for name in names:
        if name in roster.RULES or name in roster.TUNED_RULES:
            rows[name] = row(name, "rule", roster.label(name))
        elif name in policies:
            rows[name] = row(
                name,
                "learned",
                f"learned policy ({policies[name].policy.folder})",
                policy_pair=policies[name].pair,
            )
    if HF_PLAIN in real_rows:
        rows[HF_PLAIN] = row(HF_PLAIN, "hf", "HF generate (plain, wall clock incl. prefill)")
        rows[HF_ASSISTED] = row(HF_ASSISTED, "hf", "HF generate, assisted (wall clock incl. prefill)")
    if bounds is not None:
        rows[ORACLE] = {
            "label": "clairvoyant oracle (simulator only)",
            "kind": "oracle",
            "real": None,
            "sim": dict(bounds["oracle"]),
        }
    return rows


def add_ratios(rows: dict[str, dict[str, Any]], real_time: str) -> None:
    """Per column: ``speedup`` over plain (HF rows: over HF plain generate) and ``ratio_to_tcp``
    (None for HF rows, timed by the wall clock, when the real loop's time is modeled)."""
    for column in ("real", "sim"):

        def reference(name: str, column: str = column) -> float | None:
            cell = rows.get(name, {}).get(column)
            return cell["tokens_per_s"] if cell and cell["tokens_per_s"] > 0 else None

        plain, hf_plain, tcp = reference(PLAIN), reference(HF_PLAIN), reference(TCP)
        for row in rows.values():
            cell = row.get(column)
            if cell is None:
                continue
            base = hf_plain if row["kind"] == "hf" else plain
            cell["speedup"] = cell["tokens_per_s"] / base if base else None
            comparable = row["kind"] != "hf" or real_time == "wallclock"
            cell["ratio_to_tcp"] = cell["tokens_per_s"] / tcp if tcp and comparable else None


def simulator_summary(no_sim: str | None, bounds: dict | None, traces: int) -> dict:
    """The simulator's part of a scenario result: available or why not, bounds, the static grid."""
    if bounds is None:
        return {
            "available": False,
            "reason": no_sim or "not run",
            "best_static_from": "real loop",
        }
    return {"available": True, "reason": None, "traces": traces, "best_static_from": "simulator", **bounds}


def load_policies(
    folders: list[Path], pair_name: str
) -> tuple[dict[str, LearnedController], dict[str, str], list[str]]:
    """The learned policies that load, the reason for each that does not (its row is skipped and
    the report says why), and pair warnings."""
    from specrl.export import PolicyError

    policies, skipped, warnings = {}, {}, []
    for folder in folders:
        if not Path(folder).is_dir():
            skipped[str(folder)] = f"no policy folder '{folder}' (train and export one: specrl train)"
            continue
        try:
            policy = LearnedController.load(folder)
        except PolicyError as error:
            skipped[str(folder)] = str(error)
            continue
        policies[policy.name] = policy
        warning = policy.pair_warning(pair_name)
        if warning:
            warnings.append(warning)
    return policies, skipped, warnings
