"""One scenario's rows: every controller's tokens/s and acceptance in the simulator, in the real
loop priced by the latency model, on the real loop's wall clock, and (with a baseline model) in
the simulator priced by that model."""

from __future__ import annotations

from typing import Any

from sim_vs_real_parts.gaps import gap, machine_noise
from sim_vs_real_parts.real_loop import CONTROLLERS, SPLIT, run_real, subset
from specrl.envs import SpecDecodeEnv, cached_traces
from specrl.envs.scenario import Scenario
from specrl.latency import LatencyModel
from specrl.models import ModelPair
from specrl.trace_evaluation import evaluate_controller


def scenario_rows(
    name: str,
    scenario: Scenario,
    pair: ModelPair,
    latency: LatencyModel,
    profiled: LatencyModel | None,
    prompts: int,
    repeats: int,
    sim_repeats: int,
) -> tuple[list[dict[str, Any]], dict[str, float]]:
    """The rows of ``scenario`` (named ``name``) on the first ``prompts`` test traces per domain, and
    the machine's noise over its real episodes (:func:`~sim_vs_real_parts.gaps.machine_noise`).

    Args:
        scenario: with modeled time and the test split (the simulator's settings).
        latency: prices the simulator and the real loop's modeled column.
        profiled: the baseline model that also prices the simulator, or None.
        repeats: real episodes per trace of a sampled scenario (greedy: one).
        sim_repeats: simulated acceptance draws per trace of a sampled scenario.
    """
    traces = subset(cached_traces(scenario, SPLIT, pair), prompts)
    env = SpecDecodeEnv(scenario, pair=pair, split=SPLIT, time="wallclock", latency=latency)
    real, episode_ratios = run_real(env, traces, repeats)
    rows = []
    for label, make in CONTROLLERS.items():
        sim = evaluate_controller(make(), scenario, traces, latency, repeats=sim_repeats)
        modeled, wallclock = real[label]
        row = {
            "scenario": name,
            "controller": label,
            "sim": sim.to_dict(),
            "real_modeled": modeled.to_dict(),
            "real_wallclock": wallclock.to_dict(),
        }
        if profiled is not None:
            baseline = evaluate_controller(make(), scenario, traces, profiled, repeats=sim_repeats)
            row["sim_baseline"] = baseline.to_dict()
        rows.append(row)
        print(
            f"{name:>10} {label:>20}: sim {sim.tokens_per_s:7.1f}  real modeled "
            f"{modeled.tokens_per_s:7.1f}  wall clock {wallclock.tokens_per_s:7.1f} tokens/s "
            f"(sim / wall {gap(sim.tokens_per_s, wallclock.tokens_per_s):+.1%})",
            flush=True,
        )
    return rows, machine_noise(episode_ratios, len(CONTROLLERS))
