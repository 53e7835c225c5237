"""The benchmarks: the evaluation primitives they share (the one comparison loop, paired speeds
within a repeat and their 95% interval, :mod:`specrl.evaluation.records`), and their scripts run as
a user runs them, on the embedded tiny pair with tiny settings, asserting on the files they write:
each plays its configurations with its own protocol, checks greedy outputs against plain decoding
and renders its page (again from its JSON with ``--render``)."""

from __future__ import annotations

import json

import pytest
from script_runs import REPO, run_script, script

from specrl.evaluation import records
from specrl.evaluation.compare import alternating, compare, repeat_seed, unseeded
from specrl.evaluation.intervals import paired_ratio_interval


def test_compare_alternates_the_order_reseeds_each_repeat_and_warms_up_on_a_cheaper_episode():
    played = []
    players = {
        name: (lambda episode, seed, name=name: played.append((name, episode, seed))) for name in "abc"
    }
    trials = compare(players, ["full"], repeats=3, order=alternating, seed=repeat_seed, warmup=1,
                     warmup_episode="cheap")  # fmt: skip
    assert played[:3] == [("a", "cheap", 0), ("b", "cheap", 0), ("c", "cheap", 0)]  # untimed
    assert [t.player for t in trials] == list("abccbaabc")  # every other repeat backwards
    assert [t.seed for t in trials] == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # one draw per repeat, shared
    assert unseeded("any", 5, 3) == 0
    assert compare(players, [], repeats=2) == []  # no warm-up asked: no episode needed


def test_speedups_pair_speeds_within_a_repeat_and_give_their_95_percent_interval():
    # the machine is twice as fast in repeat 1; within each repeat ours is 1.1x and then 1.3x
    ours = [{"repeat": 0, "tokens": 11, "seconds": 1.0}, {"repeat": 1, "tokens": 26, "seconds": 1.0}]
    ours.append({"repeat": 1, "tokens": 0, "seconds": 1.0})  # a second episode of repeat 1: 26 / 2
    theirs = [{"repeat": 0, "tokens": 10, "seconds": 1.0}, {"repeat": 1, "tokens": 10, "seconds": 1.0}]
    assert records.speed_per_repeat(ours) == {0: 11.0, 1: 13.0}
    assert records.speedup(ours, theirs) == pytest.approx(1.2)  # the median of 1.1 and 1.3
    interval = paired_ratio_interval(*records.paired_speeds(ours, theirs))
    # ratios 1.1, 1.3: SE 0.1, t with 1 degree of freedom 12.706
    assert (interval.low, interval.high, interval.n) == pytest.approx(
        (1.2 - 1.2706, 1.2 + 1.2706, 2), abs=1e-4
    )
    one = paired_ratio_interval(*records.paired_speeds(ours[:1], theirs[:1]))
    assert one.low is None and one.n == 1  # one repeat: no interval
    drift = paired_ratio_interval([2.0, 4.0], [1.0, 2.0])  # the drift cancels within a repeat
    assert (drift.ratio, drift.low, drift.high, drift.verdict) == (2.0, 2.0, 2.0, "win")
    accepted = [
        {"proposed": 4, "accepted": 3},
        {"proposed": 4, "accepted": 1},
        {"proposed": 0, "accepted": 0},
    ]
    assert records.acceptance_rate(accepted) == 0.5 and records.acceptance_rate(accepted[2:]) == 0.0
    runs = [{"prompt": 0, "ids": [1, 2]}, {"prompt": 1, "ids": [3]}]
    assert records.outputs_equal(
        runs, [{"prompt": 1, "ids": [3]}, {"prompt": 0, "ids": [1, 2]}], lambda r: r["prompt"]
    )
    assert not records.outputs_equal(
        runs, [{"prompt": 1, "ids": [4]}, {"prompt": 0, "ids": [1, 2]}], lambda r: r["prompt"]
    )


@pytest.mark.slow  # a subprocess: about 10 s
def test_bench_decode_interleaves_every_configuration_and_ours_equals_plain_greedy(tiny_home, tmp_path):
    out = tmp_path / "decode"
    run_script("bench_decode", "--preset", "tiny", "--domains", "code", "math", "--prompts-per-domain", 1,
               "--max-new-tokens", 6, "--repeats", 2, "--k-values", 2, "--temperatures", 0, 1,
               "--no-hf-defaults", "--forward-context", 16, "--forward-reps", 1, "--threads", 1,
               "--out", out, home=tiny_home[0])  # fmt: skip
    report = json.loads((out / "bench.json").read_text())
    names = [(row["key"], row["temperature"]) for row in report["results"]]
    assert names[:4] == [("ours-plain", 0.0), ("hf-plain", 0.0), ("ours-k2", 0.0), ("hf-assist-k2", 0.0)]
    runs = report["runs"]
    assert len(runs) == 2 * 2 * len(names) and all(r["new_tokens"] == 6 for r in runs)
    blocks = [runs[i : i + len(names)] for i in range(0, len(runs), len(names))]
    for block in blocks:  # per repeat and prompt: every configuration once
        assert sorted((r["config"], r["temperature"]) for r in block) == sorted(names)
    assert len({tuple((r["config"], r["temperature"]) for r in block) for block in blocks}) > 1  # shuffled
    greedy = [r for r in runs if r["temperature"] == 0]
    assert all(r["matches_plain"] for r in greedy if r["config"].startswith("ours"))  # lossless
    assert all("matches_plain" not in r and "ids" not in r for r in runs if r["temperature"] == 1)
    spec = next(row for row in report["results"] if row["key"] == "ours-k2" and row["temperature"] == 0)
    assert spec["matches_plain"] is True and 0 <= spec["domains"]["all"]["acceptance_rate"] <= 1
    assert spec["domains"]["all"]["ratio_vs_plain_ci95"] is not None  # two repeats: an interval
    assert spec["domains"]["all"]["ratio_vs_plain_n"] == 2
    plain = next(row for row in report["results"] if row["key"] == "ours-plain" and row["temperature"] == 0)
    assert plain["domains"]["code"]["ratio_vs_plain_paired_median"] == 1.0
    assert set(report["forward_costs"]["median_ms"]) == {"target_1", "target_3", "draft_1"}
    page = (out / "bench.md").read_text()
    assert "| ours k=2 |" in page and "Greedy outputs equal ours plain" in page


@pytest.mark.slow  # a subprocess: about 10 s
def test_bench_batch_is_lossless_and_a_prompt_accepts_the_same_at_every_batch_size(tiny_home, tmp_path):
    out = tmp_path / "batch"
    run_script("bench_batch", "--preset", "tiny", "--batch-sizes", "1,3", "--ks", "0,2",
               "--max-new-tokens", 6, "--repeats", 2, "--out", out, home=tiny_home[0])  # fmt: skip
    report = json.loads((out / "batch.json").read_text())
    every = [(repeat, b, k) for repeat in (0, 1) for b in (1, 3) for k in (0, 2)]
    assert (
        sorted((r["repeat"], r["batch"], r["k"]) for r in report["runs"]) == every
    )  # each (B, k) once a pass
    table = report["table"]
    assert all(table[b]["ks"]["2"]["lossless"] for b in ("1", "3"))
    assert table["3"]["ks"]["2"]["speedup_ci95"] is not None and table["3"]["ks"]["0"]["speedup"] == 1.0
    assert table["3"]["ks"]["2"]["speedup_n"] == 2
    assert report["same_prompt_spread"] == {"2": 0.0}  # greedy: batching changes no acceptance
    page = (out / "batch.md").read_text()
    assert "token for token: yes" in page and (out / "batch.png").is_file()
    (out / "batch.md").write_text("stale")
    run_script("bench_batch", "--render", "--out", out)
    assert (out / "batch.md").read_text() == page


def batch_real_row(arrivals: bool, repeats: int, speeds: dict[str, list[float]]) -> dict:
    """A row of a ``batch_real.py`` report, its ratios from ``speeds`` (tokens/s per repeat)."""
    labels = list(speeds)
    ratios = {label: paired_ratio_interval(speeds[label], speeds["schedule"]).ratio for label in labels}
    return {
        "batch": {"arrivals": arrivals, "capacity": 8, "requests": 6},
        "repeats": repeats,
        "tokens_per_s": speeds,
        "median_tokens_per_s": {label: sorted(v)[len(v) // 2] for label, v in speeds.items()},
        "ratio_vs_schedule": ratios,
        "sim_ratio_vs_schedule": ratios,
        "ratio_vs_plain": ratios,
        "outputs_equal_plain": True,
        "last_repeat": {label: {"batch_sizes": [1, 2], "ks": [3, 2]} for label in labels},
    }


@pytest.mark.slow  # two subprocesses: about 10 s
def test_batch_real_names_every_policys_rows_and_its_page_puts_them_side_by_side(tmp_path):
    """--policy A B: rows ppo:A, ppo:A+cutoff, ppo:B, ppo:B+cutoff (NAME=FOLDER names them; folders of
    the same name are refused). The page says how many repeats each kind of scenario had, the cut-off
    of each policy, and the first policy over each other one within a repeat, with its 95% interval
    (the `+cutoff` rows are not policies of their own)."""
    refused = script("batch_real", "--policy", "a/seed", "b/seed")
    assert refused.returncode == 2 and "must differ" in refused.stderr
    listed = script("batch_real", "--policy", "carried=a/seed0", "b/y", "--static", 2, "--only", "nope")
    assert listed.returncode == 2 and "--only nope: no such row" in listed.stderr
    for row in ("'ppo:carried'", "'ppo:carried+cutoff'", "'ppo:y'", "'ppo:y+cutoff'", "'static:2'"):
        assert row in listed.stderr
    speeds = {"plain": [100.0, 80.0, 90.0], "schedule": [100.0, 80.0, 90.0]}
    speeds |= {"ppo:carried": [110.0, 88.0, 108.0], "ppo:alone": [100.0, 80.0, 100.0]}
    speeds["ppo:alone+cutoff"] = [100.0, 80.0, 90.0]
    report = {
        "rows": {"arrivals": batch_real_row(True, 3, speeds), "batch_4": batch_real_row(False, 8, speeds)},
        "schedule": {"4": 2},
        "best_k_validation": {"4": 2},
        "cutoffs": {"ppo:carried": None, "ppo:alone": 8},
        "repeats": 3,
        "policy": ["carried=a", "alone=b"],
        "machine": {"device": "cpu", "dtype": "float32", "cpu_count": 2, "processor": "x86_64",
                    "torch": "2", "transformers": "5", "python": "3"},
        "date": "today",
        "command": "pytest",
    }  # fmt: skip
    (tmp_path / "real.json").write_text(json.dumps(report))
    run_script("batch_real", "--render", "--out", tmp_path / "real")
    page = (tmp_path / "real.md").read_text()
    assert "median over 3 (arrivals) and 8 (fixed batches) interleaved repeats" in page
    assert "`ppo:alone+cutoff` above 8 rows" in page and (tmp_path / "real.png").stat().st_size > 0
    side = page[page.index("The policies side by side") :].split("\n")
    assert "ppo:carried / ppo:alone [95% interval] n" in side[2] and "alone+cutoff" not in side[2]
    # ratios 1.10, 1.10, 1.08: median 1.10; mean 1.0933 +- 4.303 x 0.01155 / sqrt(3)
    assert side[4] == "| arrivals | 1.100 [1.065, 1.122] n=3 |" and "within a repeat" in side[0]
    readme = (tmp_path / "README.md").read_text()  # the run's section of its folder's README
    assert "- Command: `pytest`" in readme and "- Tables: [`real.md`](real.md)" in readme
    assert "- Machine: cpu (float32), 2 CPUs (x86_64), torch 2, transformers 5, Python 3" in readme


def test_the_cutoff_of_every_policy_is_named_on_a_page(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "experiments"))  # the page's module (not a script)
    from benchmarks.batch_real_page import cutoff_sentence, report_cutoffs

    several = {"cutoffs": {"ppo:seed0": 8, "ppo:seed1": None}}
    assert report_cutoffs(several) == {"ppo:seed0": 8}
    assert "`ppo:seed0+cutoff` above 8 rows" in cutoff_sentence(several)
    assert report_cutoffs({"cutoff": 32}) == {"ppo": 32}  # a page of one policy
    assert "`ppo+cutoff` is the policy with speculation off above 32 rows" in cutoff_sentence(
        {"cutoffs": {"ppo": 32}}
    )
    assert cutoff_sentence({"cutoff": None}) == ""
