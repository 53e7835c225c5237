"""Grouped bar charts of the benchmark pages (the drafter pool, vLLM) and of the profiles study."""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from specrl.plots import save_figure


def bar_groups(
    path: Path,
    groups: list[str],
    series: dict[str, list[float]],
    ylabel: str,
    title: str,
    reference: float | None = None,
) -> Path:
    """Grouped bars: x = ``groups``, one bar per series name; a dashed line at ``reference``."""
    cmap = plt.get_cmap("tab10")
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.2 * len(groups) * max(1, len(series)) * 0.35), 4.2))
    x = np.arange(len(groups))
    for i, (name, values) in enumerate(series.items()):
        ax.bar(x + (i - (len(series) - 1) / 2) * width, values, width, label=name, color=cmap(i % cmap.N))
    if reference is not None:
        ax.axhline(reference, color="black", linestyle="--", linewidth=0.8)
    ax.set_xticks(x, groups)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, ncol=min(3, len(series)))
    return save_figure(fig, path)
