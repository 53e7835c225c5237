"""``experiments/bench_vllm.py``'s arithmetic and page, without vLLM: vLLM's speculative metrics
from two readings of its counters (:mod:`specrl.vllm.serve`), and the page ``--render`` writes from
a report: against the best of vLLM's own chosen settings, paired within repeats, flagging outputs
that differ from vLLM's without speculation."""

from __future__ import annotations

import json

import pytest
from script_runs import run_script

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


def test_acceptance_per_draft_length_sums_the_repeats_counts(monkeypatch):
    from script_runs import REPO

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    from benchmarks.vllm_summary import acceptance_by_length

    runs = [
        {"drafts_by_length": {"2": 4, "10": 1}, "accepted_by_length": {"2": 6, "10": 3}},
        {"drafts_by_length": {"2": 6}, "accepted_by_length": {"2": 4}},
    ]
    assert acceptance_by_length(runs) == {"2": pytest.approx(10 / 20), "10": pytest.approx(0.3)}
    assert list(acceptance_by_length(runs)) == ["2", "10"]  # by length, not as text
    assert acceptance_by_length([{"drafts_by_length": None}]) is None  # vLLM's own speculation


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


def render(report: dict, folder) -> str:
    """The page ``bench_vllm.py --render`` writes from ``report``."""
    (folder / "bench.json").write_text(json.dumps(report))
    run_script("bench_vllm", "--render", "--out", folder / "bench")
    assert (folder / "bench.png").stat().st_size > 0
    return (folder / "bench.md").read_text()


def line_of(page: str, label: str) -> str:
    return next(line for line in page.splitlines() if line.startswith(f"| {label} |"))


@pytest.mark.slow  # a subprocess: about 8 s
def test_the_page_compares_with_the_best_of_vllms_chosen_settings_paired_within_repeats(tmp_path):
    page = report()
    page["rows"]["specrl unequal"] = row(126, equal=False)
    page["rows"]["specrl paired"] = row(126)
    page["rows"]["specrl paired"]["arrivals"]["acceptance_by_length"] = {"1": 0.75, "3": 0.5}
    for label, rates in (("vLLM draft_model k=2", [120, 100, 110]), ("specrl paired", [132, 99, 121])):
        for workload in WORKLOADS:
            page["rows"][label][workload]["per_repeat"] = rates
    text = render(page, tmp_path)
    assert "vLLM draft_model k=2 |" in text  # the best of the chosen: k=4 was faster on test, but not chosen
    assert "| vLLM ngram k=4 |" not in text
    line = line_of(text, "specrl default")  # per-repeat rates missing: the ratio of medians, no interval
    assert "| 1.050 [-] n=1 |" in line and line.endswith("| yes |")  # 126 / 120
    assert "**no**" in line_of(text, "specrl unequal")
    # within repeats: 1.1, 0.99, 1.1: median 1.1; mean 1.0633 +- 4.303 x stdev / sqrt(3), a tie
    assert "| 1.100 [0.906, 1.221] n=3 |" in line_of(text, "specrl paired")
    against = text.split("## specrl against vLLM's best at each workload")[1].split("## vLLM's metrics")[0]
    assert "arrivals: vLLM draft_model k=2; B=1: vLLM draft_model k=2." in against  # in hindsight
    assert line_of(against, "specrl default") == "| specrl default | 1.050 [-] n=1 | 1.050 [-] n=1 |"
    assert "| vLLM ngram k=2 |" not in against  # specrl's rows only
    metrics = text.split("## vLLM's metrics on arrivals")[1]
    assert "| 1: 0.75, 3: 0.50 |" in line_of(metrics, "specrl paired")
    assert "| 0.60, 0.40 | - |" in line_of(metrics, "specrl default")  # per position; no lengths


def test_specrls_rows_carry_the_budget_and_leave_out_tcp_with_the_draft_when_asked(monkeypatch):
    from script_runs import REPO

    monkeypatch.syspath_prepend(str(REPO / "experiments"))  # the bench's module (not a script)
    from benchmarks.vllm_engines import specrl_rows

    rows = specrl_rows(["vllm_cpu"], "DRAFT", max_new_tokens=64, tcp_draft=False)
    assert rows == {
        "specrl vllm_cpu": {"controller": "vllm_cpu", "draft": "DRAFT", "max_new_tokens": 64},
        "specrl tcp, lookup": {"controller": "tcp", "max_new_tokens": 64},
    }
    assert set(specrl_rows(["default"], "DRAFT")) == {"specrl tcp", "specrl default", "specrl tcp, lookup"}
    lookup = specrl_rows(["lookup"], "DRAFT", lookup_only=True)
    assert lookup == {
        "specrl tcp, lookup": {"controller": "tcp"},
        "specrl lookup, lookup": {"controller": "lookup"},
    }


def test_a_policy_row_is_keyed_by_the_policys_files_and_a_rule_by_its_name(monkeypatch, tmp_path):
    import shutil

    from script_runs import REPO

    monkeypatch.syspath_prepend(str(REPO / "experiments"))
    from benchmarks.vllm_engines import policy_version

    from specrl.export.layout import policy_folder

    assert policy_version("tcp") is None and policy_version("specrl.vllm.explore:Explore") is None
    shipped = policy_version("vllm_cpu")
    assert shipped is not None and shipped != policy_version("default")
    copy = shutil.copytree(policy_folder("vllm_cpu"), tmp_path / "vllm_cpu")
    assert policy_version(str(copy)) == shipped  # the same files
    (copy / "metadata.json").write_text((copy / "metadata.json").read_text().replace("vllm_share", "other"))
    assert policy_version(str(copy)) != shipped  # retrained under the same name: another job
