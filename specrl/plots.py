"""Figures of an evaluation run, drawn from its ``results.json`` contents (:func:`write_plots`),
and :func:`save_figure`, which writes every script's plots (matplotlib, Agg backend).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only: never open a window, never need a display

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

COLUMNS = (("sim", "simulator (modeled time)"), ("real", "real loop"))


def _colors(names: list[str], palette: str = "tab20") -> dict[str, Any]:
    cmap = plt.get_cmap(palette)
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def save_figure(fig: Any, path: Path) -> Path:
    """Write the figure atomically (a temporary file in the same folder, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{path.suffix}")
    try:
        fig.savefig(tmp, dpi=120, bbox_inches="tight")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        tmp.unlink(missing_ok=True)
    return path


def plot_tokens_per_s(results: dict, path: Path) -> Path:
    """Grouped bars: x = scenario, one bar per controller; one panel per column (simulator, real)."""
    scenarios = list(results["scenarios"])
    names = list(dict.fromkeys(n for r in results["scenarios"].values() for n in r["rows"]))
    colors = _colors(names)
    fig, axes = plt.subplots(
        2, 1, figsize=(max(8.0, 1.3 * len(scenarios) * max(1, len(names)) / 6), 8), squeeze=False
    )
    width = 0.85 / max(1, len(names))
    for ax, (column, title) in zip(axes[:, 0], COLUMNS, strict=True):
        drawn = False
        for i, name in enumerate(names):
            values = [
                ((results["scenarios"][s]["rows"].get(name) or {}).get(column) or {}).get("tokens_per_s")
                for s in scenarios
            ]
            if all(v is None for v in values):
                continue
            x = np.arange(len(scenarios)) + (i - (len(names) - 1) / 2) * width
            kinds = {(results["scenarios"][s]["rows"].get(name) or {}).get("kind") for s in scenarios}
            hatch = "//" if "hf" in kinds else None  # HF: the whole generate call, prefill included
            ax.bar(
                x,
                [np.nan if v is None else v for v in values],
                width,
                label=name,
                color=colors[name],
                hatch=hatch,
            )
            drawn = True
        ax.set_title(f"tokens/sec, {title}")
        ax.set_xticks(np.arange(len(scenarios)), scenarios, rotation=20, ha="right")
        ax.set_ylabel("tokens/sec")
        if drawn:
            ax.legend(fontsize=7, ncol=4)
        else:
            ax.text(0.5, 0.5, "no data (see results.md)", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    return save_figure(fig, path)


def shift_controllers(result: dict) -> list[str]:
    """The rows a shift plot compares: TCP and every learned policy (TCP with the cut if none)."""
    learned = [
        n for n, row in result["rows"].items() if row["kind"] == "learned" and n in result["trajectories"]
    ]
    others = learned or ["tcp-tau0.25"]
    return [n for n in ["tcp", *others] if n in result["trajectories"]]


def shift_series(trajectory: dict[str, list]) -> dict[str, list]:
    """What :func:`plot_shift` draws for one trajectory: k and tau as steps over the tokens each
    step emitted, ``x`` running to the end of the last step, its values repeated to close it."""
    position = list(trajectory["position"])
    if not position:
        return {"x": [], "k": [], "tau": [], "domain": []}
    end = position[-1] + trajectory["accepted"][-1] + 1
    return {
        "x": [*position, end],
        "k": [*trajectory["k"], trajectory["k"][-1]],
        "tau": [*trajectory["tau"], trajectory["tau"][-1]],
        "domain": [*trajectory["domain"], trajectory["domain"][-1]],
    }


def segments(result: dict) -> list[tuple[int, int, str]]:
    """(start, end, domain) of each segment of the scenario's token budget, the shifts included."""
    trajectories = result["trajectories"].values()
    first = next((t["domain"][0] for t in trajectories if t["domain"]), "start")
    bounds = [0, *(shift["after_tokens"] for shift in result["shift"]), result["max_new_tokens"]]
    domains = [first, *(shift["domain"] for shift in result["shift"])]
    return list(zip(bounds[:-1], bounds[1:], domains, strict=True))


def plot_shift(result: dict, path: Path) -> Path:
    """k and tau per step against tokens generated, over the whole budget: segments shaded and
    named, shifts dashed, and an end mark where an episode ended before its budget."""
    names = shift_controllers(result)
    colors = _colors(names, "tab10")
    fig, (ax_k, ax_tau) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for index, (start, end, domain) in enumerate(segments(result)):
        for ax in (ax_k, ax_tau):
            ax.axvspan(start, end, color="grey", alpha=0.08 * (index % 2 + 1), linewidth=0)
            if start > 0:
                ax.axvline(start, color="grey", linestyle="--", linewidth=1)
        ax_tau.annotate(
            domain if start == 0 else f"-> {domain}",
            (start, 1.0),
            textcoords="offset points",
            xytext=(4, -12),
            fontsize=8,
            color="grey",
        )
    ended_early = []
    for name in names:
        series = shift_series(result["trajectories"][name])
        if not series["x"]:
            continue
        ax_k.step(series["x"], series["k"], where="post", label=name, color=colors[name])
        ax_tau.step(series["x"], series["tau"], where="post", label=name, color=colors[name])
        if series["x"][-1] < result["max_new_tokens"]:
            ax_k.plot(series["x"][-1], series["k"][-1], marker="x", color=colors[name])
            ended_early.append(f"{name} at {series['x'][-1]}")
    ax_k.set_xlim(0, result["max_new_tokens"])
    ax_k.set_ylabel("k")
    ax_tau.set_ylabel("tau")
    ax_tau.set_xlabel("tokens generated")
    ax_tau.set_ylim(-0.05, 1.05)
    learned = any(result["rows"][n]["kind"] == "learned" for n in names)
    note = "" if learned else " (no learned policy in this run)"
    ax_k.set_title(f"{result['name']}: k and tau through the shift, first held-out episode, real loop{note}")
    if ended_early:
        ax_tau.set_title("x: episode ended before the budget (EOS): " + ", ".join(ended_early), fontsize=8)
    if names:
        ax_k.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_acceptance(results: dict, path: Path) -> Path:
    """Per scenario, the share of steps at each acceptance fraction (steps that proposed), per
    speculating controller, from the real loop (the simulator where the real loop has none)."""
    scenarios = list(results["scenarios"])
    cols = min(5, max(1, len(scenarios)))
    rows = (len(scenarios) + cols - 1) // cols
    names = list(dict.fromkeys(n for r in results["scenarios"].values() for n in r["rows"]))
    colors = _colors(names)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows), squeeze=False, sharey=True)
    for ax, scenario in zip(axes.flat, scenarios, strict=False):
        for name, row in results["scenarios"][scenario]["rows"].items():
            cell = (row["real"] or {}).get("step_acceptance_histogram") or (row["sim"] or {}).get(
                "step_acceptance_histogram"
            )
            if not cell or not sum(cell["counts"]):
                continue
            counts = np.array(cell["counts"], dtype=float)
            ax.stairs(counts / counts.sum(), cell["edges"], label=name, color=colors[name])
        ax.set_title(scenario, fontsize=9)
        ax.set_xlabel("accepted / proposed", fontsize=8)
    for ax in axes.flat[len(scenarios) :]:
        ax.axis("off")
    axes[0, 0].set_ylabel("share of steps")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="lower center", ncol=6, fontsize=7, bbox_to_anchor=(0.5, -0.02))
    fig.suptitle("per-step acceptance distribution")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return save_figure(fig, path)


def write_plots(results: dict, folder: Path) -> list[Path]:
    """Every figure of a run into ``folder``: tokens_per_s.png, acceptance.png, shift_<scenario>.png."""
    folder = Path(folder)
    paths = [
        plot_tokens_per_s(results, folder / "tokens_per_s.png"),
        plot_acceptance(results, folder / "acceptance.png"),
    ]
    for name, result in results["scenarios"].items():
        if result["shift"] and result["trajectories"]:
            paths.append(plot_shift(result, folder / f"shift_{name}.png"))
    return paths
