"""The benchmarks' library (specrl.evaluation.benchmarks): each plays its configurations through
the one comparison loop with its own protocol, pairs speeds within a repeat, checks greedy outputs
against plain decoding, and renders its page. On the tiny test pairs, in seconds."""

from __future__ import annotations

import json

import pytest
from conftest import prompts

from specrl.evaluation.benchmarks import batch, batch_page, batch_real, batch_real_page, decode, records
from specrl.evaluation.benchmarks.decode_page import render_markdown
from specrl.evaluation.benchmarks.decode_summary import summarize
from specrl.evaluation.benchmarks.forward_costs import measure_forward_costs
from specrl.evaluation.compare import alternating, compare, repeat_seed, unseeded
from specrl.evaluation.intervals import paired_ratio_interval
from specrl.evaluation.machine import machine_info, pair_info, result_origin


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


def test_decode_benchmark_interleaves_every_configuration_and_ours_equals_plain_greedy(twin_pair):
    configs = decode.build_configs(twin_pair, [2], [0.0, 1.0], hf_defaults=False)
    assert [c.name for c in configs][:4] == [
        "ours-plain T=0",
        "hf-plain T=0",
        "ours-k2 T=0",
        "hf-assist-k2 T=0",
    ]
    ids = prompts(2, twin_pair.vocab_size)
    chosen = [decode.Prompt("code", 0, ids[0], seed=7), decode.Prompt("math", 0, ids[1], seed=8)]
    runs = decode.benchmark(configs, chosen, twin_pair, max_new_tokens=6, repeats=2, seed=0)
    assert len(runs) == 2 * 2 * len(configs) and all(r["new_tokens"] == 6 for r in runs)
    blocks = [runs[i : i + len(configs)] for i in range(0, len(runs), len(configs))]
    for block in blocks:  # per repeat and prompt: every configuration once
        assert sorted((r["config"], r["temperature"]) for r in block) == sorted(
            (c.key, c.temperature) for c in configs
        )
    assert len({tuple((r["config"], r["temperature"]) for r in block) for block in blocks}) > 1  # shuffled
    greedy = [r for r in runs if r["temperature"] == 0]
    assert all(r["matches_plain"] for r in greedy if r["config"].startswith("ours"))  # lossless
    assert all("matches_plain" not in r and "ids" not in r for r in runs if r["temperature"] == 1)
    rows = summarize(configs, runs, ["code", "math"])
    spec = next(row for row in rows if row["key"] == "ours-k2" and row["temperature"] == 0)
    assert (
        spec["matches_plain"] is True and spec["domains"]["all"]["acceptance_rate"] > 0.5
    )  # the twin agrees
    assert spec["domains"]["all"]["ratio_vs_plain_ci95"] is not None  # two repeats: an interval
    assert spec["domains"]["all"]["ratio_vs_plain_n"] == 2
    plain = next(row for row in rows if row["key"] == "ours-plain" and row["temperature"] == 0)
    assert plain["domains"]["code"]["ratio_vs_plain_paired_median"] == 1.0
    costs = measure_forward_costs(twin_pair, ids, [2], context=16, reps=1)
    assert set(costs["median_ms"]) == {"target_1", "target_3", "draft_1"}
    config = {"domains": ["code", "math"], "max_new_tokens": 6, "prompts_per_domain": 1, "repeats": 2}
    report = {"config": {**config, "temperatures": [0.0, 1.0]}, "results": rows, "pair": pair_info(twin_pair)}
    report.update(machine=machine_info(twin_pair), forward_costs=costs, command="pytest", date="today")
    page = render_markdown(report)
    assert "| ours k=2 |" in page and "Greedy outputs equal ours plain" in page


def test_batch_benchmark_is_lossless_and_a_prompt_accepts_the_same_at_every_batch_size(close_pair, tmp_path):
    pool = prompts(3, close_pair.vocab_size)
    runs = batch.measure(close_pair, pool, [1, 3], [0, 2], max_new_tokens=6, repeats=2, seed=0)
    every = [(repeat, b, k) for repeat in (0, 1) for b in (1, 3) for k in (0, 2)]
    assert sorted((r["repeat"], r["batch"], r["k"]) for r in runs) == every  # each (B, k) once a pass
    table = batch.summarise(runs, [1, 3], [0, 2])
    assert all(table[b]["ks"]["2"]["lossless"] for b in ("1", "3"))
    assert table["3"]["ks"]["2"]["speedup_ci95"] is not None and table["3"]["ks"]["0"]["speedup"] == 1.0
    assert table["3"]["ks"]["2"]["speedup_n"] == 2
    assert batch.same_prompt_spread(runs, [0, 2]) == {"2": 0.0}  # greedy: batching changes no acceptance
    config = {"batch_sizes": [1, 3], "ks": [0, 2], "max_new_tokens": 6, "repeats": 2, "seed": 0}
    report = {
        "table": table,
        "same_prompt_spread": {"2": 0.0},
        "config": config,
        "pair": pair_info(close_pair),
    }
    report.update(**result_origin(close_pair), runs=runs)
    batch_page.write(report, tmp_path)
    assert json.loads((tmp_path / "batch.json").read_text())["table"] == table
    assert (
        "token for token: yes" in (tmp_path / "batch.md").read_text() and (tmp_path / "batch.png").is_file()
    )


def test_batch_real_roster_puts_several_policies_side_by_side_each_with_its_own_cutoff():
    """--policy A B: rows ppo:A, ppo:A+cutoff, ppo:B (no cut-off: never slower than plain), and
    --only ppo+cutoff picks every policy's switched row; one policy keeps the row name ppo; folders
    of the same name are refused (they label the rows), NAME=FOLDER names them."""
    from specrl import StaticController

    assert batch_real.policy_labels(["specrl/policies/batch"]) == ["ppo"]
    assert batch_real.policy_labels(["runs/seed0", "runs/seed1"]) == ["ppo:seed0", "ppo:seed1"]
    with pytest.raises(ValueError, match="must differ"):
        batch_real.policy_labels(["a/seed", "b/seed"])
    # NAME=FOLDER names a row (two seed0 folders of different runs, or one policy by name)
    assert batch_real.policy_folders(["carried=a/seed0", "alone=b/seed0"]) == {
        "ppo:carried": "a/seed0",
        "ppo:alone": "b/seed0",
    }
    assert batch_real.policy_folders(["carried=a/seed0"]) == {"ppo:carried": "a/seed0"}
    for bad in (["=a/seed0"], ["carried="]):
        with pytest.raises(ValueError, match="NAME=FOLDER"):
            batch_real.policy_folders(bad)
    assert "ppo:y+cutoff" in batch_real.row_names([], ["a/x", "b/y"]) and "static:2" in batch_real.row_names(
        [2], []
    )
    assert "ppo" not in batch_real.row_names([], []) and "ppo:x" not in batch_real.row_names([], ["a/x"])
    policies = {"ppo:seed0": StaticController(3), "ppo:seed1": StaticController(1)}
    cutoffs = {"ppo:seed0": 8, "ppo:seed1": None}
    roster = batch_real.controllers({4: 2}, policies, cutoffs)
    assert list(roster)[-3:] == ["ppo:seed0", "ppo:seed0+cutoff", "ppo:seed1"]
    assert (
        roster["ppo:seed0+cutoff"].max_batch == 8
        and roster["ppo:seed0+cutoff"].controller is policies["ppo:seed0"]
    )
    switched = batch_real.controllers(
        {4: 2}, policies, {"ppo:seed0": 8, "ppo:seed1": 16}, only=["ppo+cutoff"]
    )
    assert list(switched) == ["plain", "schedule", "ppo:seed0+cutoff", "ppo:seed1+cutoff"]
    as_served = batch_real.controllers({4: 2}, policies, cutoffs, only=["ppo+cutoff"])
    assert list(as_served) == ["plain", "schedule", "ppo:seed0+cutoff", "ppo:seed1"]  # seed1 has no cut-off
    one = batch_real.controllers({4: 2}, {"ppo": policies["ppo:seed1"]}, {"ppo": None}, only=["ppo+cutoff"])
    assert list(one) == ["plain", "schedule", "ppo"]
    only_one = batch_real.controllers({4: 2}, policies, cutoffs, only=["ppo:seed1"])
    assert list(only_one) == ["plain", "schedule", "ppo:seed1"]


def test_batch_real_page_names_each_kind_of_repeats_and_every_policys_cutoff():
    """The page says how many repeats each kind of scenario had (fixed batches may get more,
    --fixed-repeats), and one number when they all had the same; and the cut-off of each policy."""
    from specrl.batch_control.schedule import cutoff_sentence, report_cutoffs

    def report(arriving: int, fixed: int) -> dict:
        rows = {"arrivals": {"batch": {"arrivals": True}, "repeats": arriving}}
        rows["batch_4"] = {"batch": {"arrivals": False}, "repeats": fixed}
        return {"rows": rows, "repeats": arriving}

    assert batch_real_page.repeats_phrase(report(3, 3)) == "3"
    assert batch_real_page.repeats_phrase(report(3, 8)) == "3 (arrivals) and 8 (fixed batches)"
    only_fixed = {"rows": {"batch_4": {"batch": {"serving": False}, "repeats": 8}}, "repeats": 3}
    assert batch_real_page.repeats_phrase(only_fixed) == "8"
    old = {"rows": {"batch_4": {"batch": {"serving": False}}}, "repeats": 2}  # a page from before
    assert batch_real_page.repeats_phrase(old) == "2"
    renamed = {"rows": {"serving": {"batch": {"serving": True}, "repeats": 4}}, "repeats": 4}
    renamed["rows"]["batch_4"] = {"batch": {"serving": False}, "repeats": 8}  # before the rename
    assert batch_real_page.repeats_phrase(renamed) == "4 (arrivals) and 8 (fixed batches)"
    several = {"cutoffs": {"ppo:seed0": 8, "ppo:seed1": None}}
    assert report_cutoffs(several) == {"ppo:seed0": 8}
    assert "`ppo:seed0+cutoff` above 8 rows" in cutoff_sentence(several)
    assert report_cutoffs({"cutoff": 32}) == {"ppo": 32}  # a page of one policy
    assert "`ppo+cutoff` is the policy with speculation off above 32 rows" in cutoff_sentence(
        {"cutoffs": {"ppo": 32}}
    )
    assert cutoff_sentence({"cutoff": None}) == ""


def test_policies_side_by_side_pairs_the_first_policy_with_each_other_one_within_a_repeat():
    """batch_real.py's table of policies: the first over each other one, the
    median of the ratios within a repeat and its 95% interval; none with one policy (the
    `+cutoff` rows are not policies of their own)."""
    values = {
        "arrivals": {
            "plain": [100.0, 80.0, 90.0],
            "ppo:carried": [110.0, 88.0, 108.0],
            "ppo:alone": [100.0, 80.0, 100.0],
            "ppo:alone+cutoff": [1.0, 1.0, 1.0],
        }
    }
    lines = batch_real_page.policies_side_by_side(values, "a repeat")
    header, _, row = lines[2].split("\n")
    assert "ppo:carried / ppo:alone [95% interval] n" in header and "alone+cutoff" not in header
    # ratios 1.10, 1.10, 1.08: median 1.10; mean 1.0933 +- 4.303 x 0.01155 / sqrt(3)
    assert row == "| arrivals | 1.100 [1.065, 1.122] n=3 |"
    assert "within a repeat" in lines[0]
    one = {"arrivals": {"plain": [1.0, 2.0], "ppo:carried": [1.0, 2.0], "ppo:carried+cutoff": [1.0, 1.0]}}
    assert batch_real_page.policies_side_by_side(one, "a repeat") == []
