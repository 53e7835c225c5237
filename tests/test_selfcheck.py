"""The library's losslessness self-check (specrl/selfcheck.py) passes on a sound engine and fails
on a broken one: each of its strict checks is shown to catch a bug."""

from __future__ import annotations

import json

import pytest
import torch

from specrl import selfcheck
from specrl.cli import main
from specrl.engine import rejection, step
from specrl.models import PairError


@pytest.mark.slow
def test_the_self_check_passes_here_and_reports_every_check(tmp_path):
    out = tmp_path / "selfcheck.json"
    code = main(["check", "--device", "cpu", "--samples", "200", "--tokens", "16", "--json", str(out)])
    result = json.loads(out.read_text())
    assert code == 0 and result["passed"] is True and result["device"] == "cpu"
    checks = result["checks"]
    assert set(checks) == {"greedy_float32", "sampling_float32", "greedy_bfloat16"}
    greedy = checks["greedy_float32"]
    assert greedy["passed"] and greedy["all_equal"] and greedy["accepts_and_rejects"]
    assert greedy["runs"] == 2 * 5 * 2 * 2  # prompts x k grid x tau x caches
    assert checks["sampling_float32"]["passed"]
    assert {(r["cache"], r["tau"]) for r in checks["sampling_float32"]["runs"]} == {
        (cache, tau) for cache in ("dynamic", "static") for tau in (0.0, 0.5)
    }
    assert all(r["p_value"] > 1e-3 for r in checks["sampling_float32"]["runs"])
    bf16 = checks["greedy_bfloat16"]  # information: never a pass or a failure
    assert bf16["passed"] is None and bf16["strict"] is False and "near-tie" in bf16["why_not_pass_fail"]
    assert 0 <= bf16["min_agree"] <= 16
    assert torch.get_float32_matmul_precision() == "highest"  # restored (the CPU default)


def accept_everything(proposal, proposed, q, p, sampling, generator):
    """A broken verdict: every drafted token accepted, then the bonus token from p after them."""
    rows, m = proposal.shape
    if not m:
        return real_judge(proposal, proposed, q, p, sampling, generator)
    accepted = torch.tensor(proposed)
    return rejection.Judgement(
        accepted, sampling.choose(p[torch.arange(rows), accepted], generator), torch.ones(proposal.shape)
    )


real_judge = step.judge


def test_the_greedy_check_fails_when_every_draft_token_is_accepted(monkeypatch):
    pair, prompts = selfcheck.close_pair("cpu"), selfcheck.random_prompts(1, 48, seed=11)
    sound = selfcheck.check_greedy(pair, prompts, tokens=16, ks=(4,), taus=(0.0,))
    assert sound["passed"] and sound["accepts_and_rejects"]
    monkeypatch.setattr(step, "judge", accept_everything)
    broken = selfcheck.check_greedy(pair, prompts, tokens=16, ks=(4,), taus=(0.0,))
    assert broken["passed"] is False and not broken["all_equal"]
    assert {(r["cache"], r["k"]) for r in broken["unequal_runs"]} == {("dynamic", 4), ("static", 4)}


def test_the_greedy_check_is_not_passed_by_a_draft_that_is_never_rejected():
    """Equality with no rejection proves nothing: a pair whose draft is the target fails the check."""
    target = selfcheck.random_llama(48, seed=0, context=128)
    twin = selfcheck.memory_pair(
        target, selfcheck.random_llama(48, seed=0, context=128), "cpu", torch.float32, "t"
    )
    result = selfcheck.check_greedy(twin, selfcheck.random_prompts(1, 48), tokens=12, ks=(3,), taus=(0.0,))
    assert result["all_equal"] and not result["accepts_and_rejects"] and result["passed"] is False


def test_the_sampling_check_fails_when_every_draft_token_is_accepted(monkeypatch):
    monkeypatch.setattr(step, "judge", accept_everything)
    result = selfcheck.check_sampling(selfcheck.small_vocab_pair("cpu"), samples=150, taus=(0.0,))
    assert result["passed"] is False and result["min_p_value"] < 1e-3


@pytest.mark.slow
def test_the_sampling_check_catches_resampling_from_p_instead_of_the_residual(monkeypatch):
    """The classic bug, which shifts the law less: 1000 samples catch it (500 do here already)."""
    monkeypatch.setattr(rejection, "residual", lambda p, q: p)
    result = selfcheck.check_sampling(selfcheck.small_vocab_pair("cpu"), taus=(0.0,), caches=("dynamic",))
    assert result["samples"] == 1000 and result["passed"] is False and result["min_p_value"] < 1e-3


def test_a_token_outside_the_law_s_support_gives_p_value_zero():
    law = torch.zeros(3, 3)
    law[0, 0], law[1, 1] = 0.5, 0.5
    counts = torch.tensor([[40.0, 0, 0], [0, 59, 0], [0, 0, 1]])
    assert selfcheck.chi_square_p_value(counts, law) == 0.0
    assert selfcheck.chi_square_p_value(law * 100, law) > 0.99  # counts exactly as expected


def test_first_divergence_counts_the_shared_prefix():
    assert selfcheck.first_divergence([1, 2, 3], [1, 2, 4]) == 2
    assert selfcheck.first_divergence([1, 2], [1, 2, 3]) == 2
    assert selfcheck.first_divergence([5], [1]) == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error a machine without CUDA gives")
def test_cuda_asked_for_where_there_is_none_is_refused_by_name():
    with pytest.raises(PairError, match="sees no CUDA device here"):
        selfcheck.run_selfcheck("cuda")
