"""One evaluation run: every scenario on one pair (:func:`~specrl.evaluation.harness.evaluate_scenario`
each) into one results record, and its files: ``results.json``, ``results.md``, the plots and
TensorBoard scalars. The real loop may run on a Ray pool the caller makes.
"""

from __future__ import annotations

import contextlib
import datetime
import re
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from specrl.envs.recording import recording_with
from specrl.envs.scenario import Scenario
from specrl.evaluation.harness import Settings, evaluate_scenario, load_policies
from specrl.evaluation.machine import machine_info, pair_info, warn_if_busy
from specrl.evaluation.report import render_markdown, summarize, write_tensorboard
from specrl.hf_assisted import confidence_threshold_variant
from specrl.io import write_report
from specrl.plots import write_plots
from specrl.provenance import load_average


def evaluate_all(
    scenarios: Sequence[Scenario],
    settings: Settings,
    policy_folders: Sequence[Path],
    header: dict[str, Any],
    simulate: bool = True,
    pool: Any = None,
    ray_address: str | None = None,
) -> dict[str, Any]:
    """Every scenario (all on one pair) with ``settings``, the learned policies of ``policy_folders``
    among the rows (a missing or invalid one is skipped and the record says why).

    ``header`` holds the record's first entries, as the caller names the run (date, command,
    argv, config); ``simulate``: add the simulator columns; ``pool``: a Ray pool that plays the
    real loop and records missing traces (the caller closes it), connected to ``ray_address``.
    Returns the results record: ``header``, then pair, machine, hf_confidence_threshold,
    simulator, latency, policies, skipped_policies, notes, scenarios and summary.
    """
    pair = scenarios[0].pair.load()
    warn_if_busy(pair)
    machine = machine_info(pair)
    no_sim = None if simulate else "--no-sim was given"
    policies, skipped_policies, notes = load_policies(list(policy_folders), pair.name)
    for folder, reason in skipped_policies.items():
        print(f"skipping learned policy {folder}: {reason}", file=sys.stderr)
    if no_sim:
        print(f"no simulator columns: {no_sim}", file=sys.stderr)
    latencies: dict = {}
    results_by_scenario = {}
    with recording_with(pool.collector()) if pool else contextlib.nullcontext():
        for i, scenario in enumerate(scenarios):
            key = (scenario.latency, scenario.k_max)
            if key not in latencies:
                latencies[key] = scenario.latency_model(pair, progress=settings.progress)
            warm = settings if i == 0 else replace(settings, warmup=0)  # later scenarios run on warm code
            real_loop = pool.real_loop if pool else None
            results_by_scenario[scenario.name] = evaluate_scenario(
                scenario, pair, latencies[key], warm, policies, no_sim, real_loop
            )
    machine["loadavg_end"] = load_average()
    if pool is not None:
        machine["ray"] = {"address": ray_address, "workers": pool.where()}

    notes += [f"Learned policy {folder} skipped: {reason}" for folder, reason in skipped_policies.items()]
    if no_sim:
        notes.append(f"Simulator columns, oracle and grid search missing: {no_sim}")
    return {
        **header,
        "pair": pair_info(pair),
        "machine": machine,
        "hf_confidence_threshold": confidence_threshold_variant(),
        "simulator": {"available": not no_sim, "reason": no_sim},
        "latency": ", ".join(sorted({f"{m.kind} ({m.device})" for m in latencies.values()})),
        "policies": {name: {"folder": str(p.policy.folder), "pair": p.pair} for name, p in policies.items()},
        "skipped_policies": skipped_policies,
        "notes": notes,
        "scenarios": results_by_scenario,
        "summary": summarize(results_by_scenario),
    }


def run_name(pair_name: str, started: datetime.datetime) -> str:
    """``<pair>__<YYYYmmdd-HHMMSS>``: a run's default folder name, the pair's name made path-safe."""
    return re.sub(r"[^A-Za-z0-9._+-]+", "_", pair_name).strip("_") + "__" + started.strftime("%Y%m%d-%H%M%S")


def write_results(results: dict[str, Any], out: Path) -> str:
    """``out/results.json``, ``results.md``, the PNG plots and ``tensorboard/``; returns the markdown."""
    markdown = render_markdown(results)
    write_report(out / "results", results, markdown)
    write_plots(results, out)
    write_tensorboard(results, out / "tensorboard", markdown)
    return markdown
