"""``experiments/bench_vllm.py``'s arithmetic and page, without vLLM: vLLM's speculative metrics
from two readings of its counters, the best of vLLM's own settings, and a page that flags outputs
that differ from vLLM's without speculation."""

from __future__ import annotations

import statistics

import pytest
from conftest import load_script

from specrl.evaluation.benchmarks.vllm_page import markdown, shown, versus, vllm_best
from specrl.vllm.serve import spec_summary

WORKLOADS = ("arrivals", "B=1")


def counters(drafts: int, drafted: int, accepted: int, per_position: list[int]) -> dict:
    return {
        "num_drafts": drafts,
        "num_draft_tokens": drafted,
        "num_accepted_tokens": accepted,
        "num_accepted_tokens_per_pos": per_position,
    }


def test_acceptance_metrics_follow_vllms_definitions_between_two_readings():
    before = counters(10, 40, 20, [8, 6, 4, 2])
    after = counters(30, 100, 50, [26, 14, 8, 2])
    summary = spec_summary(before, after)
    assert summary["acceptance_rate"] == pytest.approx(30 / 60)
    assert summary["mean_acceptance_length"] == pytest.approx(1 + 30 / 20)
    assert summary["acceptance_per_position"] == pytest.approx([18 / 20, 8 / 20, 4 / 20, 0.0])
    plain = spec_summary(counters(0, 0, 0, []), counters(0, 0, 0, []))
    assert plain["acceptance_rate"] is None and plain["acceptance_per_position"] == []


def row(rate: float, equal: bool = True) -> dict:
    cell = {
        "tokens_per_s": rate,
        "vs_plain": rate / 100,
        "vs_plain_ci95": None,
        "vs_plain_n": 1,
        "tpot_p50": 0.01,
        "tpot_p99": 0.02,
        "mean_batch": 3.0,
        "acceptance_rate": 0.5,
        "mean_acceptance_length": 2.0,
        "acceptance_per_position": [0.6, 0.4],
        "outputs_equal_plain": equal,
        "proposer_share": None,
        "draft_share": None,
    }
    return {workload: dict(cell) for workload in WORKLOADS}


def report(specrl_equal: bool = True) -> dict:
    return {
        "rows": {
            "no speculation": row(100),
            "vLLM ngram k=2": row(105),
            "vLLM ngram k=4": row(130),  # not chosen on validation: not on the page
            "vLLM draft_model k=2": row(120),
            "vLLM draft_model dynamic": row(118),
            "specrl default": row(126, specrl_equal),
        },
        "chosen_static_k": {"ngram": 2, "draft_model": 2},
        "dynamic_schedule": [[1, 3, 2], [4, 64, 0]],
        "own_engine": {"B=1": {"specrl": 60.0, "vllm": 100.0, "specrl_vs_vllm": 0.6}},
        "settings": {"requests": 8, "max_new_tokens": 16, "repeats": 1, "static_k": [2, 4], "k_max": 8},
        "vllm_version": "0.32.0",
        "machine": {
            "device": "cpu",
            "dtype": "float32",
            "cpu_count": 2,
            "processor": "x86_64",
            "torch": "2.13.0",
            "transformers": "5.19.0",
            "python": "3.11",
        },
        "date": "2026-12-04 00:00 UTC",
        "command": "python experiments/bench_vllm.py",
    }


def test_the_page_compares_with_the_best_of_vllms_chosen_settings_and_flags_unequal_outputs():
    page = report()
    assert vllm_best(page) == "vLLM draft_model k=2"  # k=4 was faster on test, but not chosen
    assert "vLLM ngram k=4" not in shown(page)
    text = markdown(page, "bench.png")
    line = next(line for line in text.splitlines() if line.startswith("| specrl default |"))
    assert "| 1.050 [-] n=1 |" in line and line.endswith("| yes |")  # 126 / 120, one repeat: no interval
    unequal = markdown(report(specrl_equal=False), "bench.png")
    assert "**no**" in next(line for line in unequal.splitlines() if line.startswith("| specrl default |"))


def test_the_ratio_to_vllms_best_is_paired_within_repeats_when_the_report_has_them():
    page = report()
    for label, rates in (("vLLM draft_model k=2", [120, 100, 110]), ("specrl default", [132, 99, 121])):
        for workload in WORKLOADS:
            page["rows"][label][workload]["per_repeat"] = rates
    paired = versus(page, "specrl default", "vLLM draft_model k=2")
    assert paired.ratio == pytest.approx(1.1) and paired.n == 3  # within repeats: 1.1, 0.99, 1.1
    half = 4.303 * statistics.stdev([1.1, 0.99, 1.1]) / 3**0.5  # t with 2 degrees of freedom
    assert (paired.low, paired.high) == pytest.approx((1.0633 - half, 1.0633 + half), abs=1e-3)
    assert paired.verdict == "tie"  # 1.1x over 3 repeats, one of them below 1
    text = markdown(page, "x.png")
    line = next(line for line in text.splitlines() if line.startswith("| specrl default |"))
    assert f"| {paired.cell()} |" in line and "| 1.100 [0.906, 1.221] n=3 |" in line


def test_every_engine_starts_once_a_repeat_in_a_new_order_and_its_runs_accumulate(monkeypatch):
    bench = load_script("bench_vllm")
    started = []

    def run_engine(label, job):
        assert job["repeats"] == 1
        started.append(label.split(": ")[1])
        return {"test B=1": [{"engine": label.split(": ")[1]}]}

    monkeypatch.setattr(bench, "run_engine", run_engine)
    jobs = {name: {"workloads": [], "repeats": 3} for name in "abcdef"}
    runs = bench.interleaved(jobs, 3, "test")
    repeats = [started[i : i + 6] for i in range(0, 18, 6)]
    assert all(sorted(r) == list("abcdef") for r in repeats)
    assert len({tuple(r) for r in repeats}) > 1  # a new order each repeat
    assert all(len(runs[name]["test B=1"]) == 3 for name in jobs)
    assert all(run["engine"] == name for name in jobs for run in runs[name]["test B=1"])


def test_an_interrupted_bench_resumes_from_its_finished_engine_runs(monkeypatch, tmp_path):
    bench = load_script("bench_vllm")
    started = []

    def run_engine(label, job):
        started.append(label)
        if len(started) == 3:
            raise RuntimeError("interrupted")
        return {"test B=1": [{"tokens_per_s": float(len(started))}]}

    monkeypatch.setattr(bench, "run_engine", run_engine)
    jobs = {name: {"workloads": [], "env": {"x": name}} for name in "ab"}
    done = tmp_path / "bench.runs.json"
    with pytest.raises(RuntimeError):
        bench.interleaved(jobs, 2, "test", done)
    runs = bench.interleaved(jobs, 2, "test", done)  # the two finished runs are not started again
    assert len(started) == 5
    assert sorted(r["tokens_per_s"] for name in jobs for r in runs[name]["test B=1"]) == [1.0, 2.0, 4.0, 5.0]
    jobs["a"]["env"]["x"] = "changed"  # another setting is not taken for a finished one
    bench.interleaved(jobs, 2, "test", done)
    assert len(started) == 7


def test_the_specrl_rows_configure_the_proposers_controller_and_drafter():
    bench = load_script("bench_vllm")
    rows = bench.specrl_rows(["default"], "/draft", "C", "D")
    assert rows == {
        "specrl tcp": {"C": "tcp", "D": "/draft"},
        "specrl default": {"C": "default", "D": "/draft"},
        "specrl tcp, lookup": {"C": "tcp"},  # no draft model: the lookup drafts
    }
    alone = bench.specrl_rows(["lookup"], "/draft", "C", "D", lookup_only=True)
    assert alone == {"specrl tcp, lookup": {"C": "tcp"}, "specrl lookup, lookup": {"C": "lookup"}}
