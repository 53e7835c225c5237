"""What the experiment scripts turn measurements into: the package's paired ratio and markdown
table, and the studies of ``experiments/`` (sim_vs_real.py, profiles.py) run as a user runs them,
on small settings, their files read back (a script is run, never imported)."""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_paired_ratio_is_the_median_of_per_repeat_ratios():
    from specrl.evaluation.compare import paired_ratio as paired

    # the machine runs twice as fast in the second repeat: the ratio within each repeat is 1.1
    assert paired([110.0, 220.0, 55.0], [100.0, 200.0, 50.0]) == pytest.approx(1.1)
    assert paired([1.0, 3.0, 2.0], [1.0, 1.0, 1.0]) == 2.0


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


def run_script(name: str, *flags: str, home: Path) -> subprocess.CompletedProcess:
    run = subprocess.run(
        [sys.executable, str(REPO / "experiments" / f"{name}.py"), *flags],
        cwd=REPO,
        env=dict(os.environ, SPECRL_HOME=str(home), OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return run


@pytest.mark.slow
def test_sim_vs_real_prices_the_same_real_steps_twice_and_its_page_is_rebuilt_from_its_json(
    tmp_path, tiny_home
):
    home, _ = tiny_home
    latency = REPO / "specrl" / "latency" / "profiles" / "cpu-epyc-1t-tiny.json"
    flags = ["--preset", "tiny", "--scenarios", "code", "--prompts", "1", "--sim-repeats", "2"]
    flags += ["--latency", str(latency), "--baseline", "none", "--out", str(tmp_path / "svr")]
    run_script("sim_vs_real", *flags, home=home)
    results = json.loads((tmp_path / "svr.json").read_text())
    rows = results["rows"]
    controllers = [row["controller"] for row in rows]
    assert len(controllers) == 8 and len(set(controllers)) == 8 and {"tcp", "static k=1"} <= set(controllers)
    assert results["pair"] == "specrl-zoo-tiny" and results["split"] == "test" and results["baseline"] is None
    for row in rows:
        # greedy: the simulator replays the real steps exactly, so it differs from the real loop
        # priced by the same latency model in nothing (and from the wall clock only in the price)
        assert row["sim"]["tokens_per_s"] == pytest.approx(row["real_modeled"]["tokens_per_s"], rel=1e-6)
        assert row["sim"]["tokens"] == row["real_wallclock"]["tokens"] > 0
    # every controller on the one trace (one repeat: greedy), the machine's noise over those episodes
    noise = results["noise"]["code"]
    assert (
        noise["episodes"] == 8 and noise["episode_sd"] >= 0 and noise["controller_se"] == noise["episode_sd"]
    )
    worst = results["worst"]["code"]
    assert worst["sim_modeled"] == pytest.approx(0.0, abs=1e-6)
    ratios = [row["sim"]["tokens_per_s"] / row["real_wallclock"]["tokens_per_s"] for row in rows]
    assert worst["sim_wall"] == pytest.approx(max(abs(r - 1) for r in ratios))
    assert worst["sim_wall_level"] == pytest.approx(statistics.median(ratios) - 1)
    assert results["worst_sim_wall_gap"] == worst["sim_wall"]
    ranking = results["ranking"]["code"]
    assert ranking["modeled"] is True and -1 <= ranking["spearman_wallclock"] <= 1

    page = (tmp_path / "svr.md").read_text()
    assert "| scenario | controller | sim tok/s | real wall-clock tok/s | **sim / wall** |" in page
    assert f"(simulator vs wall clock, Spearman): code: {ranking['spearman_wallclock']:.2f}." in page
    # --render rewrites the page from the JSON alone
    (tmp_path / "svr.md").unlink()
    run = subprocess.run(
        [
            sys.executable,
            str(REPO / "experiments" / "sim_vs_real.py"),
            "--render",
            str(tmp_path / "svr.json"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "svr.md").read_text() == page
    # the run's section of its folder's README (experiments/benchmarks/result_folder.py)
    readme = (tmp_path / "README.md").read_text()
    assert readme.startswith("# Simulator against the real loop: `svr`\n")
    assert f"- Command: `{results['command']}`" in readme and "- Tables: [`svr.md`](svr.md)" in readme


@pytest.mark.slow
def test_profiles_puts_each_policy_beside_the_rules_retuned_under_each_profile(tmp_path):
    """The embedded pair's shipped traces and policy: nothing is trained (the alone arm's run is
    kept already, as an interrupted call leaves it)."""
    out = tmp_path / "profiles"
    kept = out / "runs" / "alone-cpu-xeon-2t" / "seed0"
    kept.mkdir(parents=True)
    for name in ("policy.pt2", "metadata.json", "results.md"):
        shutil.copy(REPO / "specrl" / "policies" / "default" / name, kept / name)
    default = str(REPO / "specrl" / "policies" / "default")
    flags = ["--carried", default, "--seeds", "0", "--alone", "cpu-xeon-2t", "--profiles", "cpu-xeon-2t"]
    flags += ["gpu-like-h200", "--scenarios", "code", "--also", f"other={default}", "--repeats", "1"]
    run = run_script("profiles", *flags, "--out", str(out), home=tmp_path / "home")
    assert "specrl train" not in run.stdout  # the kept run is not trained again
    record = json.loads((out / "profiles.json").read_text())
    rows = {row["profile"]: row for row in record["rows"]}
    assert set(rows) == {"cpu-xeon-2t", "gpu-like-h200"} and record["seeds"] == [0]
    assert set(rows["cpu-xeon-2t"]["policies"]) == {"carried", "priced rule", "other", "alone"}
    assert "alone" not in rows["gpu-like-h200"]["policies"]
    ratios = [row["policies"]["carried"][0] / row["best_rule"] for row in rows.values()]
    page = (out / "profiles.md").read_text()
    assert (out / "profiles.png").is_file() and page.startswith("# Policies on machines")

    # the prices, as the features read them
    assert "| cpu-xeon-2t | yes | 0.138 | 0.074 |" in page
    # the overall table: per seed, the worst cell and the geometric mean over every profile
    geometric = statistics.geometric_mean(ratios)
    assert f"| carried | 0 | {min(ratios):.3f} | {geometric:.3f} | 2 |" in page
    assert "| alone | 0 |" in page and page.count("| other | 0 |") == 1
    # every scenario: the same policy twice (other, carried) gives the same ratio; carried / alone is 1
    xeon = next(line for line in page.splitlines() if line.startswith("| cpu-xeon-2t | code | "))
    assert (
        f"| {ratios[0]:.3f} [{ratios[0]:.3f}, {ratios[0]:.3f}] |" in xeon
        and "| 1.000 [1.000, 1.000] |" in xeon
    )
    # what each policy drafts with, beside the best static setting; a policy not run there: "-"
    assert "| profile | scenario | best static | carried | alone | other |" in page
    h200 = [line for line in page.splitlines() if line.startswith("| gpu-like-h200 | code | (k=")]
    choice = rows["gpu-like-h200"]["choices"]["carried"]
    assert h200 and f"| plain {choice.get('plain', 0.0):.2f}; k {choice['mean_k']:.1f} | - |" in h200[0]
