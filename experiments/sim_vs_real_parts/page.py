"""The page of a simulator-against-real-loop run: per scenario the largest gaps, their level and
shape and the machine's noise, then every controller's row."""

from __future__ import annotations

from sim_vs_real_parts.gaps import gap
from specrl.tables import markdown_table


def render(results: dict) -> str:
    """The markdown page of a run's JSON."""
    worst, config = results["worst"], results["config"]
    with_baseline = results["baseline"] is not None
    titles = ["scenario", "max \\|sim / wall - 1\\|", "level", "shape", "max \\|modeled / wall - 1\\|"]
    titles += ["max \\|sim / modeled - 1\\|"]
    titles += ["profiled: max \\|sim / wall - 1\\|", "level", "shape"] if with_baseline else []
    noise = results.get("noise", {})
    titles += ["machine noise per episode", "2 x its standard error per controller"] if noise else []
    summary = []
    for scenario, entry in worst.items():
        keys = ["sim_wall", "sim_wall_level", "sim_wall_shape", "modeled_wall", "sim_modeled"]
        keys += (
            ["profiled_sim_wall", "profiled_sim_wall_level", "profiled_sim_wall_shape"]
            if with_baseline
            else []
        )
        cells = [scenario] + [f"{entry[k]:+.1%}" if k.endswith("level") else f"{entry[k]:.1%}" for k in keys]
        if noise:
            cells += [f"{noise[scenario]['episode_sd']:.1%}", f"{2 * noise[scenario]['controller_se']:.1%}"]
        summary.append(cells)
    ranks = ", ".join(f"{s}: {v['spearman_wallclock']:.2f}" for s, v in results["ranking"].items())
    load = results["load_average"]
    lines = [
        f"Simulator vs real loop, pair `{results['pair']}`, {results['split']} prompts ({config['prompts']} "
        f"per domain; sampled scenarios: {config['repeats']} real seeds and {config['sim_repeats']} "
        f"simulated draws per trace). Latency model: {results['latency']['kind']}"
        + (f"; baseline: {results['baseline']['kind']}." if with_baseline else "."),
        "",
        "Level: the median over controllers of sim / wall - 1 (one factor for all controllers: the machine "
        "slower or faster than when calibrated). Shape: the largest |(sim / wall) / (1 + level) - 1| (what "
        "the model gets wrong between controllers)."
        + (
            " Machine noise: the standard deviation over real episodes of modeled / wall-clock seconds "
            "(one model on the very steps it prices, so only the machine varies); a controller's gap "
            "within twice its standard error cannot be told from that noise."
            if noise
            else ""
        ),
        "",
        markdown_table(titles, summary),
        "",
        f"Largest |sim / wall clock - 1| over all rows: {results['worst_sim_wall_gap']:.1%}. Rank "
        f"correlation of the controllers (simulator vs wall clock, Spearman): {ranks}.",
        "",
        table(results["rows"], with_baseline),
        "",
        f"Machine: {results['machine']}; load average {load[0]:.2f} at the start, {load[1]:.2f} at the end "
        f"(this run keeps about 2 busy itself). Command: `{results['command']}` "
        f"({results['seconds']} s).",
    ]
    return "\n".join(lines) + "\n"


def table(rows: list[dict], baseline: bool) -> str:
    """Markdown: per scenario and controller, tokens/sec in the simulator and on the wall clock, the
    gaps, and the acceptance rates."""
    header = ["scenario", "controller", "sim tok/s", "real wall-clock tok/s", "**sim / wall**"]
    header += ["modeled / wall", "sim / modeled"]
    header += ["profiled sim / wall"] if baseline else []
    header += ["sim accept", "real accept"]
    lines = []
    for row in rows:
        sim, modeled, wall = (row[k]["tokens_per_s"] for k in ("sim", "real_modeled", "real_wallclock"))
        cells = [
            row["scenario"],
            row["controller"],
            f"{sim:.1f}",
            f"{wall:.1f}",
            f"**{gap(sim, wall):+.1%}**",
            f"{gap(modeled, wall):+.1%}",
            f"{gap(sim, modeled):+.1%}",
        ]
        if baseline:
            cells.append(f"{gap(row['sim_baseline']['tokens_per_s'], wall):+.1%}")
        cells += [f"{row['sim']['acceptance_rate']:.3f}", f"{row['real_wallclock']['acceptance_rate']:.3f}"]
        lines.append(cells)
    return markdown_table(header, lines)
