"""The outputs of an evaluation run: ``results.md`` (a header, ``## Summary``: ratio tables over
scenarios and the latency-spread comparison, then ``## Per scenario``) and TensorBoard scalars."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specrl.evaluation.harness import TCP
from specrl.provenance import describe_machine
from specrl.tables import markdown_table

PER_SCENARIO_HEADING = "## Per scenario"
#: Row metrics written to TensorBoard, per column (``speedup`` as ``speedup_over_plain``).
SCALARS = ("tokens_per_s", "speedup", "ratio_to_tcp", "acceptance_rate", "mean_acceptance_length")
SCALARS += ("mean_k", "mean_tau")
CONFIDENCE_CUT = "tcp-tau0.25"


# ---- the summary --------------------------------------------------------------------------------


def summarize(scenarios: dict[str, dict]) -> dict[str, Any]:
    """controller -> scenario -> ratio, for each (metric, column); and the latency spread of TCP with
    and without its confidence cut."""
    names = list(dict.fromkeys(name for result in scenarios.values() for name in result["rows"]))
    summary: dict[str, Any] = {}
    for metric in ("speedup", "ratio_to_tcp"):
        for column in ("real", "sim"):
            summary[f"{metric}_{column}"] = {
                name: {
                    scenario: (result["rows"].get(name, {}).get(column) or {}).get(metric)
                    for scenario, result in scenarios.items()
                }
                for name in names
            }
    summary["latency_spread"] = {
        scenario: latency_spread(result["rows"]) for scenario, result in scenarios.items()
    }
    return summary


def latency_spread(rows: dict[str, dict]) -> dict[str, Any] | None:
    """Per-token latency std / cv / p90 (ms) of TCP at tau 0 and 0.25 in the real loop, and which is lower."""
    cells = {
        name: (rows.get(name, {}).get("real") or {}).get("latency_ms_per_token")
        for name in (TCP, CONFIDENCE_CUT)
    }
    if not all(cells.values()):
        return None
    out: dict[str, Any] = {
        name: {key: cell[key] for key in ("std", "cv", "p50", "p90")} for name, cell in cells.items()
    }
    out["cut_lowers_std"] = cells[CONFIDENCE_CUT]["std"] < cells[TCP]["std"]
    out["cut_lowers_cv"] = cells[CONFIDENCE_CUT]["cv"] < cells[TCP]["cv"]
    return out


# ---- markdown -----------------------------------------------------------------------------------


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def number(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def scenario_title(result: dict) -> str:
    sampling = "greedy" if result["temperature"] == 0 else f"temperature {result['temperature']:g}"
    shift = "".join(f", -> {s['domain']} after {s['after_tokens']} tokens" for s in result["shift"])
    return f"{result['name']} ({sampling}{shift})"


def scenario_table(result: dict) -> str:
    header = [
        "controller",
        "sim tok/s",
        "sim vs plain",
        "sim vs TCP",
        "real tok/s",
        "real vs plain",
        "real vs TCP",
        "acceptance",
        "acceptance length",
        "mean k",
        "mean tau",
        "ms/token p50 / p90",
        "ms/token std (cv)",
    ]
    lines = []
    for row in result["rows"].values():
        sim, real = row["sim"] or {}, row["real"] or {}
        steps = real or sim  # per-step quantities: the real loop's, else the simulator's
        latency = real.get("latency_ms_per_token")
        lines.append(
            [
                row["label"],
                number(sim.get("tokens_per_s")),
                ratio(sim.get("speedup")),
                ratio(sim.get("ratio_to_tcp")),
                number(real.get("tokens_per_s")),
                ratio(real.get("speedup")),
                ratio(real.get("ratio_to_tcp")),
                number(steps.get("acceptance_rate"), 3),
                number(steps.get("mean_acceptance_length"), 2),  # "-" in results before vLLM's names
                number(steps.get("mean_k"), 2),
                number(steps.get("mean_tau"), 3),
                f"{latency['p50']:.2f} / {latency['p90']:.2f}" if latency else "-",
                f"{latency['std']:.2f} ({latency['cv']:.2f})" if latency else "-",
            ]
        )
    return markdown_table(header, lines)


def scenario_notes(result: dict) -> list[str]:
    sim = result["simulator"]
    notes = []
    split = result.get("split", "held-out")  # results written before the validation/test splits
    if sim["available"]:
        best = sim["best_static"]
        notes.append(
            f"Simulator: {sim['traces']} {split} traces, modeled time; best static over the "
            f"{len(sim['static_grid'])}-setting grid: k={best['k']}, tau={best['tau']:g} "
            f"({best['tokens_per_s']:.1f} tok/s); oracle {sim['oracle']['tokens_per_s']:.1f} tok/s."
        )
    else:
        notes.append(
            f"Simulator columns missing: {sim['reason']}. Best static: hindsight over the real-loop statics."
        )
    episodes = ", ".join(f"{e['domain']}#{e['prompt_index']}" for e in result["episodes"])
    notes.append(f"Real loop ({result['real_time']} time): {split} episodes {episodes}.")
    if result.get("hf_assistant"):
        hf = result["hf_assistant"]
        notes.append(
            f"HF assisted: {hf['num_assistant_tokens']} assistant tokens "
            f"({hf['num_assistant_tokens_schedule']}), confidence threshold "
            f"{hf['assistant_confidence_threshold']} {hf['confidence_threshold']}."
        )
    notes += [f"Skipped {name}: {reason}." for name, reason in result["skipped"].items()]
    return notes


def ratio_table(summary: dict[str, Any], metric: str, scenarios: Iterable[str]) -> str:
    """Controller x scenario: ``metric`` in the real loop / in the simulator."""
    real, sim = summary[f"{metric}_real"], summary[f"{metric}_sim"]
    scenarios = list(scenarios)
    return markdown_table(
        ["controller", *scenarios],
        [[name, *(f"{ratio(real[name][s])} / {ratio(sim[name][s])}" for s in scenarios)] for name in real],
    )


def render_markdown(results: dict) -> str:
    """The whole ``results.md``."""
    scenarios, summary, config = results["scenarios"], results["summary"], results["config"]
    md = [
        f"# Evaluation: {results['pair']['name']}",
        "",
        f"Command: `{results['command']}`  ",
        f"Machine: {describe_machine(results['machine'])}  ",
        f"Date: {results['date']}; git {results['machine']['git']['commit'] or '?'}"
        f"{' (dirty)' if results['machine']['git']['dirty'] else ''}",
        "",
        f"Prompt split: {config.get('split', 'held-out')} (docs/design.md section 4b). "
        f"Real loop: {config['episodes']} episode(s) per scenario, median of "
        f"{config['repeats']} interleaved repeat(s) after {config['warmup']} warm-up pass(es) in the first "
        "scenario; "
        f"{config['time']} time of draft + verify (HF rows: wall clock of the whole generate call, prefill "
        f"included; their speed-up is over HF's plain generate). Simulator: "
        + (
            f"{config['sim_prompts_per_domain']} trace(s) per start domain, latency model "
            f"{results['latency']}."
            if results["simulator"]["available"]
            else "not available (see below)."
        ),
        "",
    ]
    md += [f"- {line}" for line in results["notes"]]
    md += ["", "## Summary", "", "Speed-up over plain decoding, real loop / simulator:", ""]
    md += [ratio_table(summary, "speedup", scenarios), ""]
    md += ["Ratio to the TCP heuristic (tau = 0), real loop / simulator:", ""]
    md.append(ratio_table(summary, "ratio_to_tcp", scenarios))
    md += [
        "",
        "Does the confidence cut lower latency variance? Per-token latency (each token charged its "
        "step's seconds / tokens emitted) of TCP without (tau = 0) and with (tau = 0.25) the cut, real loop:",
        "",
    ]
    spreads = {s: v for s, v in summary["latency_spread"].items() if v}
    header = ["scenario", *(f"{key} (tau 0 / 0.25)" for key in ("std ms", "cv", "p90 ms")), "cut lowers std"]
    lines = [
        [s, *(f"{v[TCP][key]:.2f} / {v[CONFIDENCE_CUT][key]:.2f}" for key in ("std", "cv", "p90"))]
        + ["yes" if v["cut_lowers_std"] else "no"]
        for s, v in spreads.items()
    ]
    md.append(markdown_table(header, lines))
    if spreads:
        lower = sum(v["cut_lowers_std"] for v in spreads.values())
        md += ["", f"The cut lowered the std of per-token latency in {lower} of {len(spreads)} scenario(s)."]
    md += ["", PER_SCENARIO_HEADING, ""]
    for result in scenarios.values():
        md += [f"### {scenario_title(result)}", ""]
        md.append(scenario_table(result))
        md += [""] + [f"- {note}" for note in scenario_notes(result)] + [""]
    return "\n".join(md) + "\n"


# ---- TensorBoard ----------------------------------------------------------------------------------


def tag(*parts: str) -> str:
    return "/".join(re.sub(r"[^\w.\-]", "_", part) for part in parts)


def scalars(results: dict) -> Iterable[tuple[str, float]]:
    """(tag, value) of every row metric, under ``eval/<scenario>/<controller>/<metric>_<column>``."""
    for scenario, result in results["scenarios"].items():
        for name, row in result["rows"].items():
            for column in ("real", "sim"):
                cell = row[column] or {}
                for key in SCALARS:
                    if cell.get(key) is not None:
                        suffix = "speedup_over_plain" if key == "speedup" else key
                        yield tag("eval", scenario, name, f"{suffix}_{column}"), float(cell[key])
                latency = cell.get("latency_ms_per_token")
                if latency:
                    for key in ("std", "cv", "p90"):
                        yield (
                            tag("eval", scenario, name, f"latency_ms_per_token_{key}_{column}"),
                            float(latency[key]),
                        )


def write_tensorboard(results: dict, log_dir: Path, markdown: str) -> Path:
    """Every scalar of :func:`scalars` at step 0, k and tau through each domain shift (step = tokens
    generated), and ``results.md`` as text under ``eval/results``."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(log_dir))
    try:
        for name, value in scalars(results):
            writer.add_scalar(name, value, 0)
        for scenario, result in results["scenarios"].items():
            for name, path in result["trajectories"].items():
                for position, k, tau in zip(path["position"], path["k"], path["tau"], strict=True):
                    writer.add_scalar(tag("eval", scenario, name, "shift_k"), k, position)
                    writer.add_scalar(tag("eval", scenario, name, "shift_tau"), tau, position)
        writer.add_text("eval/results", markdown)
    finally:
        writer.close()
    return log_dir
