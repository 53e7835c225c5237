"""What the rows of a simulator-against-real-loop run say: the largest gaps per scenario, split
into a level and a shape, the machine's own noise, and whether the simulator orders the
controllers as the real loop does."""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy.stats import spearmanr


def gap(a: float, b: float) -> float:
    """``a / b - 1``; NaN where ``b`` is not positive."""
    return a / b - 1 if b > 0 else float("nan")


def machine_noise(episode_ratios: list[float], controllers: int) -> dict[str, float]:
    """How much the wall clock moves on its own: the relative standard deviation of modeled /
    wall-clock seconds over episodes (one model, so only the machine varies), and the standard
    error that leaves on one controller's total over its share of the episodes. A sim / wall gap
    within about twice that error cannot be told from the machine's noise."""
    logs = np.log(np.asarray(episode_ratios))
    spread = float(np.std(logs, ddof=1)) if len(logs) > 1 else float("nan")
    per_controller = max(1, len(logs) // controllers)
    half = len(logs) // 2
    return {
        "episodes": len(logs),
        "episode_sd": spread,
        "controller_se": spread / np.sqrt(per_controller),
        "second_half_vs_first": float(np.exp(logs[half:].mean() - logs[:half].mean()) - 1)
        if half
        else float("nan"),
    }


def worst_gaps(rows: list[dict]) -> dict[str, dict[str, float]]:
    """Per scenario, the largest |gap| over controllers of each comparison, and its split into a
    level (the median over controllers of sim / wall - 1: one factor for every controller, e.g.
    the machine running slower or faster than when it was calibrated) and a shape (the largest
    |(sim / wall) / (1 + level) - 1|: what the model gets wrong between controllers)."""
    columns = {"sim_wall": ("sim", "real_wallclock"), "modeled_wall": ("real_modeled", "real_wallclock")}
    columns["sim_modeled"] = ("sim", "real_modeled")
    if all("sim_baseline" in row for row in rows):
        columns["profiled_sim_wall"] = ("sim_baseline", "real_wallclock")
    result: dict[str, dict[str, float]] = {}
    for scenario in dict.fromkeys(row["scenario"] for row in rows):
        mine = [row for row in rows if row["scenario"] == scenario]
        entry = result[scenario] = {}
        for key, (top, bottom) in columns.items():
            ratios = np.array([row[top]["tokens_per_s"] / row[bottom]["tokens_per_s"] for row in mine])
            entry[key] = float(np.abs(ratios - 1).max())
            if key in ("sim_wall", "profiled_sim_wall"):
                level = float(np.median(ratios))
                entry[f"{key}_level"] = level - 1
                entry[f"{key}_shape"] = float(np.abs(ratios / level - 1).max())
    return result


def rankings(rows: list[dict]) -> dict[str, dict]:
    """Per scenario: whether the simulator orders the controllers as the real loop does."""
    by_scenario: dict[str, list] = {}
    for row in rows:
        by_scenario.setdefault(row["scenario"], []).append(
            (row["controller"], *(row[k]["tokens_per_s"] for k in ("sim", "real_modeled", "real_wallclock")))
        )
    result = {}
    for scenario, entries in by_scenario.items():
        order = [[e[0] for e in sorted(entries, key=lambda e: -e[i])] for i in (1, 2, 3)]
        # ties share the mean of their ranks
        spearman = spearmanr([e[1] for e in entries], [e[3] for e in entries]).statistic
        result[scenario] = {
            "modeled": order[0] == order[1],
            "wallclock": order[0] == order[2],
            "spearman_wallclock": float(spearman),
        }
    return result


def summarize(rows: list[dict], noise: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The report's summary entries of ``rows``: ``worst`` (:func:`worst_gaps`), ``noise`` (per
    scenario), ``worst_sim_wall_gap`` (over every scenario) and ``ranking`` (:func:`rankings`)."""
    worst = worst_gaps(rows)
    return {
        "worst": worst,
        "noise": noise,
        "worst_sim_wall_gap": max(entry["sim_wall"] for entry in worst.values()),
        "ranking": rankings(rows),
    }
