"""Small parts of the experiment scripts that turn measurements into reported numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import load_script


def test_machine_noise_is_the_spread_of_modeled_over_wall_clock_per_episode():
    from specrl.evaluation.sim_vs_real import machine_noise as noise

    steady = noise([0.9] * 16, controllers=8)
    assert steady["episode_sd"] == pytest.approx(0.0) and steady["controller_se"] == pytest.approx(0.0)
    ratios = list(np.exp(np.random.default_rng(0).normal(0.0, 0.1, 800)))
    measured = noise(ratios, controllers=8)
    assert measured["episode_sd"] == pytest.approx(0.1, rel=0.1)
    assert measured["controller_se"] == pytest.approx(measured["episode_sd"] / math.sqrt(100))
    drifting = noise([1.0] * 10 + [0.8] * 10, controllers=2)
    assert drifting["second_half_vs_first"] == pytest.approx(-0.2)


def test_paired_ratio_is_the_median_of_per_repeat_ratios():
    from specrl.evaluation.compare import paired_ratio as paired

    # the machine runs twice as fast in the second repeat: the ratio within each repeat is 1.1
    assert paired([110.0, 220.0, 55.0], [100.0, 200.0, 50.0]) == pytest.approx(1.1)
    assert paired([1.0, 3.0, 2.0], [1.0, 1.0, 1.0]) == 2.0


def test_spearman_ranks_share_ties():
    from specrl.evaluation.sim_vs_real import rankings

    rows = [
        {
            "scenario": "s",
            "controller": c,
            "sim": {"tokens_per_s": sim},
            "real_modeled": {"tokens_per_s": sim},
            "real_wallclock": {"tokens_per_s": wall},
        }
        for c, sim, wall in (("a", 1.0, 10.0), ("b", 2.0, 10.0), ("c", 3.0, 30.0))
    ]
    # a tie in the wall clock: Spearman with shared ranks is 0.866, not the 1.0 or 0.5 of broken ties
    assert rankings(rows)["s"]["spearman_wallclock"] == pytest.approx(0.8660254)
    reversed_rows = [
        dict(row, real_wallclock={"tokens_per_s": 1 / row["sim"]["tokens_per_s"]}) for row in rows
    ]
    assert rankings(reversed_rows)["s"]["spearman_wallclock"] == pytest.approx(-1.0)


def test_markdown_table_writes_header_rule_and_rows():
    from specrl.tables import markdown_table

    text = markdown_table(["a", "b"], [["x", 1], ["y", 2.5]])
    assert text == "| a | b |\n|---|---|\n| x | 1 |\n| y | 2.5 |"
    aligned = markdown_table(["name", "n", "c"], [], align=[None, "right", "center"])
    assert aligned.splitlines()[1] == "|---|---:|:---:|"
    with pytest.raises(ValueError, match="2 cells for 3 columns"):
        markdown_table(["a", "b", "c"], [["x", "y"]])
    with pytest.raises(ValueError, match="unknown alignment"):
        markdown_table(["a"], [], align=["middle"])


def test_the_choices_table_puts_each_policy_beside_the_best_static_setting():
    from specrl.evaluation.profiles import ProfileRow

    script = load_script("profiles")
    row = ProfileRow("cpu-xeon-2t", "code_t1", 100.0, "static", 150.0, best_static="(k=2, tau=0.0)")
    row.choices = {
        "carried": {"draft": 0.9, "plain": 0.1, "mean_k": 2.76},
        "alone": {"draft": 1.0, "mean_k": 2.0},
    }
    text = script.choices_section([row], ["carried", "alone"])
    assert "| profile | scenario | best static | carried | alone |" in text
    assert "| cpu-xeon-2t | code_t1 | (k=2, tau=0.0) | plain 0.10; k 2.8 | plain 0.00; k 2.0 |" in text
    pool = ProfileRow("gpu-like-h200", "mixed_pool", 100.0, "pool", 120.0, best_static="(k=3, tau=0.0, big)")
    pool.choices = {"carried": {"big": 0.6, "draft": 0.3, "plain": 0.1, "mean_k": 3.0}}
    text = script.choices_section([pool], ["carried"])
    assert "each drafter" in text and "| big 0.60, draft 0.30, plain 0.10; k 3.0 |" in text


def test_the_overall_table_gives_each_seed_its_worst_cell_and_geometric_mean_over_every_profile():
    from specrl.evaluation.profiles import ProfileRow

    script = load_script("profiles")
    rows = [ProfileRow(p, "code", 50.0, "static", 100.0) for p in ("cpu-a", "gpu-b")]
    rows[0].policies = {"carried": [90.0, 110.0], "other": [100.0]}
    rows[1].policies = {"carried": [100.0, 121.0], "other": [81.0]}
    text = script.overall_section(rows, ["carried", "alone", "other"])
    assert "| carried | 0 | 0.900 | 0.949 | 2 |" in text  # sqrt(0.9 * 1.0)
    assert "| carried | 1 | 1.100 | 1.154 | 2 |" in text  # sqrt(1.1 * 1.21) = 1.1537
    assert "| other | 0 | 0.810 | 0.900 | 2 |" in text and "| alone |" not in text
