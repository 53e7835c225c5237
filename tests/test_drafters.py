"""The drafter pool: every drafter is lossless, switching drafters per step is too, and bad names,
missing models and missing libraries are refused by name."""

from __future__ import annotations

import builtins
import itertools
import json

import numpy as np
import pytest
import torch
from conftest import (
    chi_square_p_value,
    exact_two_token_law,
    make_pair,
    prompts,
    reference_greedy,
    step_and_check_rollback,
    two_token_counts,
)

import specrl
from specrl.engine import rejection as rejection_module
from specrl.engine.drafters import DRAFTERS, DrafterError, DrafterPool, NGramDrafter
from specrl.engine.drafters.cascade import CascadeDrafter
from specrl.engine.drafters.ngram import NGramIndex
from specrl.engine.sampling import SamplingConfig


class CycleDrafters:
    """A controller that changes drafter (and k) every step."""

    def __init__(self, drafters, ks=(3, 1, 5, 0, 2)):
        self.drafters, self.ks = drafters, ks

    def reset(self):
        self.cycle = zip(itertools.cycle(self.ks), itertools.cycle(self.drafters))

    def act(self, observation):
        k, drafter = next(self.cycle)
        return specrl.Action(k, 0.0, drafter=drafter)

    def observe(self, result):
        pass


def decode(pair, prompt, controller, n=24, **options):
    return specrl.SpeculativeDecoder(pair, controller).generate(
        prompt, max_new_tokens=n, stop_at_eos=False, **options
    )


def repetitive_prompt(vocab_size: int) -> list[int]:
    """A prompt whose text repeats, so the n-gram drafter has something to look up."""
    return prompts(1, vocab_size, seed=3, length=6)[0] * 3


@pytest.mark.parametrize("batch", [1, 4])
@pytest.mark.parametrize("drafter", DRAFTERS)
def test_greedy_output_equals_plain_greedy_for_every_drafter(pool_pair, drafter, batch):
    """At B = 4 the rows (prompts of different lengths, repetitive and not) draft together through
    the drafter and accept their own tokens; each row equals its own plain greedy decoding."""
    vocab = pool_pair.vocab_size
    rows = [prompts(1, vocab, seed=11)[0], repetitive_prompt(vocab)]
    rows += [p[: 4 + 5 * i] for i, p in enumerate(prompts(2, vocab, seed=12))] + [
        repetitive_prompt(vocab)[2:]
    ]
    batches = (
        [[row] for row in rows] if batch == 1 else [rows[i : i + batch] for i in range(0, len(rows), batch)]
    )
    proposed = 0
    for group in batches:
        expected = [reference_greedy(pool_pair.target, prompt, 24) for prompt in group]
        for k in (1, 3, 6):
            outs = decode(pool_pair, group, specrl.StaticController(k, 0.0, drafter))
            assert [out.token_ids for out in outs] == expected, f"{drafter} k={k}"
            assert all(step.drafter == drafter for out in outs for step in out.steps)
            proposed += outs.stats.proposed
    assert proposed > 0, f"{drafter} never proposed: equality would be trivial"


def test_switching_drafters_every_step_is_lossless_and_keeps_every_cache_a_true_prefix(pool_pair):
    prompt = repetitive_prompt(pool_pair.vocab_size)
    expected = reference_greedy(pool_pair.target, prompt, 40)
    out = decode(pool_pair, prompt, CycleDrafters(DRAFTERS), n=40)
    assert out.token_ids == expected
    assert {step.drafter for step in out.steps} == set(DRAFTERS)
    # at temperature 1, after every step each cache of every drafter equals a full recompute
    generation, outcomes = step_and_check_rollback(pool_pair, prompt, 60, drafters=(*DRAFTERS, "draft"))
    assert set(generation.drafters) == set(DRAFTERS)
    assert {(True, True), (False, True), (True, False)} <= outcomes
    # and for a batch of ragged rows, each drafter's caches holding holes
    batch = [prompt, prompt[:7], prompts(1, pool_pair.vocab_size, seed=4)[0], prompt[3:]]
    generation, outcomes = step_and_check_rollback(pool_pair, batch, 40, "B=4", drafters=(*DRAFTERS, "draft"))
    assert set(generation.drafters) == set(DRAFTERS)
    assert {(True, True), (False, True), (True, False)} <= outcomes


@pytest.mark.slow
@pytest.mark.parametrize(
    "drafter,k,sampling,batch",
    [
        ("ngram", 2, SamplingConfig(1.0), 1),
        ("ngram", 3, SamplingConfig(0.7, top_k=4), 1),
        ("cascade", 3, SamplingConfig(1.0), 1),
        ("cascade", 2, SamplingConfig(1.3, top_p=0.9), 1),
        ("ngram", 2, SamplingConfig(1.0), 4),
        ("cascade", 3, SamplingConfig(1.0), 4),
        ("draft-mid", 3, SamplingConfig(1.0), 4),
        ("draft-int8", 3, SamplingConfig(1.0), 4),
    ],
)
def test_sampling_with_every_drafter_follows_the_target_law(small_vocab_pair, drafter, k, sampling, batch):
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]  # repeats: the n-gram drafter proposes at both positions
    counts = two_token_counts(
        small_vocab_pair, prompt, k, 0.0, sampling, n=1000, drafter=drafter, batch=batch
    )
    law = exact_two_token_law(small_vocab_pair, prompt, sampling)
    assert chi_square_p_value(counts, law) > 1e-3


@pytest.mark.slow
def test_chi_square_catches_a_point_mass_rejection_that_resamples_from_p(small_vocab_pair, monkeypatch):
    """Power: after rejecting an n-gram token, drawing from p (instead of p without it) fails."""
    monkeypatch.setattr(rejection_module, "residual", lambda p, q: p)
    prompt, sampling = [1, 2, 3, 1, 2, 3, 1, 2], SamplingConfig(1.0)
    counts = two_token_counts(small_vocab_pair, prompt, 2, 0.0, sampling, n=1000, drafter="ngram")
    assert chi_square_p_value(counts, exact_two_token_law(small_vocab_pair, prompt, sampling)) < 1e-3


def test_ngram_lookup_takes_the_longest_tail_and_its_latest_occurrence():
    index = NGramIndex(max_ngram=3)
    lookup = lambda ids, k: index.lookup(ids, k)  # noqa: E731
    # tail (7, 8, 9): its latest earlier occurrence is followed by 4, 5
    assert lookup([7, 8, 9, 1, 2, 7, 8, 9, 4, 5, 6, 7, 8, 9], 2) == [4, 5]
    # no 3-gram or 2-gram match: the 1-gram 9 is followed by 3
    assert lookup([1, 9, 3, 5, 9], 4) == [3, 5, 9]
    assert lookup([1, 2, 3], 4) == []  # the tail never occurred before
    assert lookup([5], 4) == []
    assert lookup([4, 4, 4, 4], 8) == [4]  # the latest match is followed by the last token only


def scan_match(tokens: list[int], max_ngram: int = 3, min_ngram: int = 1) -> tuple[int, int] | None:
    """The definition, by brute force: the longest tail's order and where the text that followed
    its latest earlier window starts."""
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), min_ngram - 1, -1):
        tail = tokens[length - n :]
        starts = [i for i in range(length - n) if tokens[i : i + n] == tail]
        if starts:
            return n, starts[-1] + n
    return None


def test_ngram_index_equals_the_scan_as_the_sequence_grows_and_when_it_changes():
    """The incremental index answers as a full search would: on sequences that grow by steps of
    1..8 tokens (as a generation's do), and on a sequence that does not extend the indexed one."""
    rng = np.random.default_rng(0)
    checked = 0
    for trial in range(60):
        vocab = int(rng.integers(2, 12))  # small vocabularies: many matches of every order
        drafter = NGramIndex(max_ngram=3, min_ngram=int(rng.integers(1, 3)))
        sequence = rng.integers(0, vocab, int(rng.integers(1, 6))).tolist()
        while len(sequence) < 120:
            expected = scan_match(sequence, 3, drafter.min_ngram)
            assert drafter.longest_match(sequence) == expected, (trial, sequence)
            assert drafter.longest_match(torch.tensor(sequence)) == expected  # a tensor is read the same
            checked += 1
            sequence += rng.integers(0, vocab, int(rng.integers(1, 9))).tolist()
        changed = list(sequence)
        changed[int(rng.integers(0, len(changed)))] = vocab  # an edit inside the indexed prefix
        assert drafter.longest_match(torch.tensor(changed)) == scan_match(changed, 3, drafter.min_ngram)
        shorter = sequence[: int(rng.integers(1, len(sequence)))]  # a rollback
        assert drafter.longest_match(torch.tensor(shorter)) == scan_match(shorter, 3, drafter.min_ngram)
    assert checked > 1000


def test_ngram_proposes_a_point_mass_and_obeys_the_stop_rule():
    drafter = NGramDrafter(vocab_size=10, rows=2)
    rows = [[1, 2, 3, 4, 1, 2], [5, 6, 7, 5]]  # the rows' lookups find four and three tokens
    proposal = drafter.propose(rows, [5, 5], specrl.Action(5), SamplingConfig(1.0), None)
    assert proposal.tokens.tolist() == [[3, 4, 1, 2], [6, 7, 5, 0]] and proposal.proposed == [4, 3]
    assert proposal.stopped == [True, True]  # fewer than k to propose
    assert torch.equal(proposal.q.sum(-1), torch.ones(2, 4))
    assert proposal.q[0].argmax(-1).tolist() == [3, 4, 1, 2]
    stop_at_two = specrl.Action(5, stop=lambda position, confidence, entropy: position == 2)
    proposal = drafter.propose(rows, [5, 0], stop_at_two, SamplingConfig(1.0), None)
    assert proposal.tokens.tolist() == [[3, 4], [0, 0]] and proposal.proposed == [2, 0]
    assert proposal.stopped == [True, False] and [len(c) for c in proposal.confidences] == [3, 0]


@torch.inference_mode()
def test_cascade_proposes_the_mid_drafts_own_greedy_continuation(pool_pair):
    """The middle model verifies the small draft: what reaches the target is the mid's text."""
    prompt = prompts(1, pool_pair.vocab_size, seed=4)[0]
    other = prompts(2, pool_pair.vocab_size, seed=5)[1][:6]
    cascade = CascadeDrafter(pool_pair.draft, pool_pair.mid, pool_pair.vocab_size, inner_k=2, rows=2)
    proposal = cascade.propose([prompt, other], [7, 4], specrl.Action(7), SamplingConfig(0.0), None)
    assert proposal.proposed == [7, 4]
    assert proposal.tokens[0].tolist() == reference_greedy(pool_pair.mid, prompt, 7)
    assert proposal.tokens[1, :4].tolist() == reference_greedy(pool_pair.mid, other, 4)
    # q is the mid's distribution at each position (a point of its softmax's argmax)
    assert proposal.q[0].argmax(-1).tolist() == proposal.tokens[0].tolist()
    assert proposal.q[1, :4].argmax(-1).tolist() == proposal.tokens[1, :4].tolist()
    assert all(held <= len(prompt) + 7 for cache in cascade.caches() for held in cache.lengths)


def test_quantized_drafts_really_are_quantized_and_close_to_the_draft(pool_pair):
    prompt = torch.tensor([prompts(1, pool_pair.vocab_size, seed=2)[0]])
    with torch.inference_mode():
        full = pool_pair.draft(prompt).logits
        for name in ("draft-int8", "draft-int4"):
            model = DrafterPool(pool_pair).model(name)
            assert model is not pool_pair.draft and model is DrafterPool(pool_pair).model(name)  # built once
            assert "Linear" in type(model.lm_head).__name__
            assert type(model.lm_head.weight).__name__ != "Parameter"  # a torchao quantised tensor
            logits = model(prompt).logits
            assert not torch.equal(logits, full)
            assert (logits - full).abs().mean() < 0.25 * full.abs().mean()


def test_unknown_or_unavailable_drafters_are_refused_by_name(pair, pool_pair):
    with pytest.raises(DrafterError, match="unknown drafter 'eagle'.*draft, draft-mid, draft-int8"):
        decode(pool_pair, [1, 2, 3], specrl.StaticController(2, 0.0, "eagle"))
    assert "cascade" not in DrafterPool(pair).available() and "cascade" in DrafterPool(pool_pair).available()
    for name in ("draft-mid", "cascade"):
        with pytest.raises(DrafterError, match=f"{name}.*needs the pair's second draft.*add-mid"):
            decode(pair, [1, 2, 3], specrl.StaticController(2, 0.0, name))
    with pytest.raises(ValueError, match="Action.drafter must be a drafter's name"):
        specrl.Action(2, drafter="")


def test_a_missing_quantization_library_is_named_with_the_install_command(tmp_path, monkeypatch):
    pair = make_pair(tmp_path)  # a fresh pair: no quantised copy cached
    real_import = builtins.__import__

    def no_torchao(name, *args, **kwargs):
        if name.startswith("torchao"):
            raise ImportError("No module named 'torchao'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_torchao)
    with pytest.raises(DrafterError, match=r"int8 draft needs torchao.*pip install 'specrl\[quant\]'"):
        DrafterPool(pair).model("draft-int8")


def test_a_mid_draft_with_another_tokenizer_is_refused(tmp_path):
    from conftest import random_llama, save_model, word_tokenizer

    tokenizer = word_tokenizer(64)
    target = save_model(tmp_path / "t", random_llama(64, 0), tokenizer)
    draft = save_model(tmp_path / "d", random_llama(64, 1), tokenizer)
    mid = save_model(tmp_path / "m", random_llama(64, 2), word_tokenizer(64, offset=7))
    with pytest.raises(specrl.PairError, match="tokenizers differ"):
        specrl.load_pair(target=target, draft=draft, mid=mid, device="cpu")


def _result(drafter: str, proposed: int, accepted: int) -> specrl.StepResult:
    action = specrl.Action(4, drafter=drafter)
    return specrl.StepResult(action, 4, proposed, accepted, accepted + 1, 0.001, 0.01)


def test_pool_rule_tries_each_drafter_then_follows_acceptance_and_explores():
    rule = specrl.PoolRuleController(("draft", "ngram", "draft-mid"), k=3, window=4, explore_every=5)
    rule.reset()
    chosen = []
    outcomes = {"draft": (4, 1), "ngram": (4, 4), "draft-mid": (4, 2)}  # ngram is accepted best
    for _ in range(10):
        action = rule.act(None)
        chosen.append(action.drafter)
        assert action.k == 3
        rule.observe(_result(action.drafter, *outcomes[action.drafter]))
    # untried first, in order; then the best; every 5th step the least recently used
    assert chosen[:3] == ["draft", "ngram", "draft-mid"]
    assert chosen[3] == "ngram"
    assert chosen[4] == "draft"  # step 5: explore the least recently used
    assert chosen[5:9] == ["ngram"] * 4 and chosen[9] == "draft-mid"
    # a drafter that proposes nothing (no n-gram match) counts as acceptance 0
    rule.reset()
    for name, proposed, accepted in (("draft", 4, 1), ("ngram", 0, 0), ("draft-mid", 4, 1)):
        rule.act(None)
        rule.observe(_result(name, proposed, accepted))
    assert rule.act(None).drafter == "draft"


def test_pool_rule_decodes_losslessly_with_the_drafters_it_chooses(pool_pair):
    prompt = repetitive_prompt(pool_pair.vocab_size)
    rule = specrl.PoolRuleController(("draft", "ngram", "cascade"), k=3, explore_every=4)
    out = decode(pool_pair, prompt, rule, n=40)
    assert out.token_ids == reference_greedy(pool_pair.target, prompt, 40)
    assert {step.drafter for step in out.steps} == {"draft", "ngram", "cascade"}
    with pytest.raises(ValueError, match="distinct drafter names"):
        specrl.PoolRuleController(("draft", "draft"))


def test_cli_decodes_with_the_embedded_pairs_cascade_and_refuses_a_drafter_with_a_policy(tiny_home, capsys):
    from specrl.cli import main

    home, pair = tiny_home
    assert pair.mid is not None  # the embedded tiny pair has its draft-mid
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SPECRL_HOME", str(home))
        main(["generate", "--preset", "tiny", "--device", "cpu", "--drafter", "cascade", "--k", "3",
              "--prompt", "def f(x):", "--max-new-tokens", "12"])  # fmt: skip
    printed = capsys.readouterr().out
    stats = json.loads(printed[printed.index("\n{") :])
    assert stats["drafter"] == "cascade" and stats["new_tokens"] == 12 and stats["num_draft_tokens"] > 0
    with pytest.raises(SystemExit):
        main(["generate", "--policy", "x", "--prompt", "a", "--drafter", "ngram"])


@pytest.mark.slow  # a subprocess: about 15 s
def test_bench_drafters_writes_its_table_and_plot_and_renders_them_again(tiny_home, tmp_path):
    from script_runs import run_script

    out = tmp_path / "drafters"
    run_script("bench_drafters", "--preset", "tiny", "--drafters", "draft,ngram,cascade",
               "--domains", "code,math", "--ks", "1,4", "--prompts", 1, "--max-new-tokens", 16,
               "--repeats", 1, "--out", out, home=tiny_home[0])  # fmt: skip
    table = json.loads((out / "drafters.json").read_text())["table"]
    assert set(table) == {"code", "math"}
    for domain in table:
        rows = table[domain]["drafters"]
        assert set(rows) == {"draft", "ngram", "cascade", "pool rule"}
        assert all(row["identical_to_plain"] for row in rows.values())
        assert table[domain]["best_drafter"] != "pool rule" and table[domain]["pool_rule_vs_best_single"] > 0
        assert rows["ngram"]["best_k"] in (1, 4) and rows["draft"]["cost"] > 0
    page = (out / "drafters.md").read_text()
    assert "| code | cascade |" in page and "pool rule / best single" in page
    assert (out / "drafters.png").stat().st_size > 0
    (out / "drafters.md").write_text("stale")
    run_script("bench_drafters", "--render", "--out", out)
    assert (out / "drafters.md").read_text() == page


@pytest.mark.slow  # a subprocess: about 10 s
def test_bench_drafters_decodes_a_scenarios_own_prompts_on_its_pair(tiny_home, tmp_path):
    from conftest import REPO
    from script_runs import run_script

    out, scenario = tmp_path / "snippets", REPO / "examples" / "prompts" / "snippets.yaml"
    run_script("bench_drafters", "--scenario", scenario, "--preset", "tiny",
               "--drafters", "draft,ngram", "--ks", "1", "--prompts", 1, "--max-new-tokens", 8,
               "--repeats", 1, "--out", out, home=tiny_home[0])  # fmt: skip
    report = json.loads((out / "drafters.json").read_text())
    assert set(report["table"]) == {"snippets"} and report["config"]["domains"] == ["snippets"]
    assert all(row["identical_to_plain"] for row in report["table"]["snippets"]["drafters"].values())
