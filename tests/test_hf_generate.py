"""specrl inside HF ``generate`` (``custom_generate=speculative_generate``): exact, lossless, strict."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import prompts, random_llama
from test_architectures import FAMILIES as ARCHITECTURES
from test_architectures import build as build_architecture
from test_engine import chi_square_p_value, exact_two_token_law
from transformers import StoppingCriteria, StoppingCriteriaList

import specrl
from specrl.engine.sampling import SamplingConfig
from specrl.hf import SpeculativeGenerateOutput, pair_from_models, speculative_generate

REPO = Path(__file__).resolve().parents[1]
N = 24


def default_policy_folder() -> Path:
    """The shipped default policy (inside the package, or at the top level in older layouts)."""
    for folder in (REPO / "specrl" / "policies" / "default", REPO / "policies" / "default"):
        if (folder / "metadata.json").is_file():
            return folder
    pytest.skip("no shipped default policy in this checkout")


def plain(model, ids: torch.Tensor, n: int = N, **options) -> torch.Tensor:
    return model.generate(ids, do_sample=False, max_new_tokens=n, **options)


def spec(pair, ids: torch.Tensor, controller, n: int = N, **options):
    return pair.target.generate(
        ids,
        custom_generate=speculative_generate,
        draft=pair.draft,
        controller=controller,
        max_new_tokens=n,
        **options,
    )


def ids_of(prompt: list[int]) -> torch.Tensor:
    return torch.tensor([prompt])


# ---- greedy: token for token what plain generate returns -----------------------------------------


@pytest.mark.parametrize("k,tau", [(0, 0.0), (1, 0.0), (3, 0.0), (5, 0.3), (8, 0.6)])
def test_greedy_equals_plain_generate_for_static_controllers(pair, k, tau):
    for prompt in prompts(3, pair.vocab_size, seed=k):
        ids = ids_of(prompt)
        out = spec(pair, ids, specrl.StaticController(k, tau), do_sample=False)
        assert out.dtype == torch.long and out.shape == (1, len(prompt) + N)
        assert torch.equal(out, plain(pair.target, ids))


def test_greedy_equals_plain_generate_with_tcp_learned_and_a_twin_draft(pair, twin_pair):
    policy = specrl.LearnedController.load(default_policy_folder())
    for prompt in prompts(2, pair.vocab_size, seed=7):
        ids = ids_of(prompt)
        want = plain(pair.target, ids)
        assert torch.equal(spec(pair, ids, specrl.TCPController()), want)
        assert torch.equal(spec(pair, ids, policy), want)
        assert torch.equal(spec(pair, ids, str(default_policy_folder())), want)  # a folder path
        assert torch.equal(spec(pair, ids, "default"), want)  # a shipped policy's name
        assert torch.equal(spec(twin_pair, ids, specrl.StaticController(4)), plain(twin_pair.target, ids))


def test_partial_acceptance_so_equality_is_not_trivial(close_pair):
    ids = ids_of(prompts(1, close_pair.vocab_size)[0])
    out = spec(close_pair, ids, specrl.StaticController(4), return_dict_in_generate=True)
    assert isinstance(out, SpeculativeGenerateOutput)
    assert torch.equal(out.sequences, plain(close_pair.target, ids))
    assert out.stats.new_tokens == N and out.stats.steps == len(out.steps)
    assert 0 < out.stats.accepted < out.stats.proposed


class StopAfter(StoppingCriteria):
    """A user's stopping criterion: stop once ``token`` has been emitted."""

    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        return input_ids[:, -1] == self.token


def test_eos_stopping_criteria_and_left_padding_behave_as_plain_generate(pair):
    prompt = prompts(1, pair.vocab_size, seed=3)[0]
    ids = ids_of(prompt)
    reference = plain(pair.target, ids)[0, len(prompt) :].tolist()
    eos = reference[9]  # a token plain generate emits: both must stop at its first occurrence
    want = plain(pair.target, ids, eos_token_id=eos)
    assert want.shape[1] == len(prompt) + reference.index(eos) + 1
    assert torch.equal(spec(pair, ids, specrl.StaticController(4), eos_token_id=eos), want)

    options = dict(stopping_criteria=StoppingCriteriaList([StopAfter(reference[6])]))  # a user's criterion
    want = plain(pair.target, ids, **options)
    assert want.shape[1] < len(prompt) + N
    assert torch.equal(spec(pair, ids, specrl.StaticController(4), **options), want)

    padded, mask = torch.tensor([[0, 0, *prompt]]), torch.tensor([[0, 0] + [1] * len(prompt)])
    want = plain(pair.target, padded, attention_mask=mask)
    out = spec(pair, padded, specrl.StaticController(3), attention_mask=mask)
    assert torch.equal(out, want) and torch.equal(out[:, 2:], plain(pair.target, ids))


@pytest.mark.parametrize("family", sorted(ARCHITECTURES))
def test_greedy_equals_plain_generate_on_every_architecture(family):
    """The families of tests/test_architectures.py, built in memory; 8 padding rows on both
    models, so the default vocabulary is the output rows, as plain generate decodes them."""
    target = build_architecture(ARCHITECTURES[family](), 0)
    draft = build_architecture(ARCHITECTURES[family](), 0, noise=0.5)
    n = 40  # prompt 12 + 40 tokens: past the 16-token window of the sliding families
    proposed = accepted = 0
    for prompt in prompts(2, 48, seed=11):
        ids = ids_of(prompt)
        want = target.generate(ids, do_sample=False, max_new_tokens=n, eos_token_id=None)
        out = target.generate(
            ids,
            custom_generate=speculative_generate,
            draft=draft,
            controller=specrl.StaticController(3),
            max_new_tokens=n,
            eos_token_id=None,
            return_dict_in_generate=True,
        )
        assert torch.equal(out.sequences, want), family
        proposed, accepted = proposed + out.stats.proposed, accepted + out.stats.accepted
    assert 0 < accepted < proposed, f"{family}: acceptance {accepted}/{proposed}"


# ---- sampling: lossless, with generate's own temperature / top-k / top-p -------------------------


def two_token_counts(pair, prompt, k, n, **options) -> torch.Tensor:
    counts = torch.zeros(pair.vocab_size, pair.vocab_size)
    controller = specrl.StaticController(k)
    for seed in range(n):
        out = spec(
            pair, ids_of(prompt), controller, n=2, do_sample=True, eos_token_id=None, seed=seed, **options
        )
        t1, t2 = out[0, len(prompt) :].tolist()
        counts[t1, t2] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize(
    "k,options,sampling",
    [
        (3, dict(temperature=1.0), SamplingConfig(1.0)),
        (2, dict(temperature=0.7, top_k=4), SamplingConfig(0.7, top_k=4)),
        (4, dict(temperature=1.3, top_p=0.9), SamplingConfig(1.3, top_p=0.9)),
    ],
)
def test_sampling_inside_generate_matches_the_target_law(small_vocab_pair, k, options, sampling):
    prompt = [1, 2, 3, 0, 4]
    counts = two_token_counts(small_vocab_pair, prompt, k, 2000, **options)
    law = exact_two_token_law(small_vocab_pair, prompt, sampling)
    assert chi_square_p_value(counts, law) > 1e-3


def test_generate_options_become_the_engines_sampling_config(pair, monkeypatch):
    seen = []
    original = specrl.hf.Generation

    def recording(*args, **kwargs):
        seen.append(args[3])
        return original(*args, **kwargs)

    monkeypatch.setattr(specrl.hf, "Generation", recording)
    ids, ctrl = ids_of(prompts(1, pair.vocab_size)[0]), specrl.StaticController(2)
    spec(pair, ids, ctrl, n=2, do_sample=False)
    spec(pair, ids, ctrl, n=2, do_sample=True)  # HF's default top_k=50 applies
    spec(pair, ids, ctrl, n=2, do_sample=True, temperature=0.7, top_k=5, top_p=0.8)
    assert seen == [
        SamplingConfig(0.0),
        SamplingConfig(1.0, top_k=50),
        SamplingConfig(0.7, top_k=5, top_p=0.8),
    ]


def test_seed_repeats_a_sample_and_the_global_generator_seeds_it_by_default(pair):
    ids, ctrl = ids_of(prompts(1, pair.vocab_size)[0]), specrl.StaticController(3)
    first = spec(pair, ids, ctrl, do_sample=True, seed=5)
    assert torch.equal(spec(pair, ids, ctrl, do_sample=True, seed=5), first)
    torch.manual_seed(11)
    again = spec(pair, ids, ctrl, do_sample=True)
    torch.manual_seed(11)
    assert torch.equal(spec(pair, ids, ctrl, do_sample=True), again)


# ---- refusals, each naming the limitation and the fix -------------------------------------------


def left_padded(rows: list[list[int]], pad: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch as a tokenizer with padding_side="left" gives it: ids and attention mask."""
    width = max(len(row) for row in rows)
    ids = torch.tensor([[pad] * (width - len(row)) + row for row in rows])
    mask = torch.tensor([[0] * (width - len(row)) + [1] * len(row) for row in rows])
    return ids, mask


def test_a_batch_decodes_each_prompt_as_plain_generate_does_alone(close_pair):
    """Three left-padded prompts of different lengths, partial acceptance: each row's tokens are
    plain generate's of its prompt alone, after its own padding."""
    rows = [
        prompt[:length]
        for prompt, length in zip(prompts(3, close_pair.vocab_size, seed=5), (12, 7, 10), strict=True)
    ]
    ids, mask = left_padded(rows)
    for controller in (specrl.StaticController(4), specrl.TCPController()):
        out = spec(close_pair, ids, controller, attention_mask=mask, return_dict_in_generate=True)
        assert out.sequences.shape == (3, ids.shape[1] + N)
        for r, row in enumerate(rows):
            alone = plain(close_pair.target, ids_of(row))[0]
            assert torch.equal(out.sequences[r], torch.cat([ids[r, : ids.shape[1] - len(row)], alone]))
        assert out.stats.new_tokens == 3 * N and out.stats.steps == len(out.steps)
        assert 0 < out.stats.accepted < out.stats.proposed  # the rows' steps pooled, not trivially equal
    # prompts of different lengths that all run to the budget need no padding token (nor an EOS id)
    full = spec(
        close_pair, ids, specrl.StaticController(4), attention_mask=mask, eos_token_id=None, pad_token_id=None
    )
    assert full.shape == (3, ids.shape[1] + N)


def test_rows_that_stop_leave_the_batch_and_are_padded_as_generate_pads_them(pair):
    rows = [prompts(2, pair.vocab_size, seed=9)[0], prompts(2, pair.vocab_size, seed=9)[1][:8]]
    ids, mask = left_padded(rows)
    first = plain(pair.target, ids_of(rows[0]))[0, len(rows[0]) :].tolist()
    criteria = StoppingCriteriaList([StopAfter(first[5])])  # row 0 stops early; row 1 maybe later
    out = spec(
        pair, ids, specrl.StaticController(3), attention_mask=mask, stopping_criteria=criteria, pad_token_id=7
    )
    for r, row in enumerate(rows):
        alone = plain(pair.target, ids_of(row), stopping_criteria=criteria)[0]
        mine = out[r, ids.shape[1] - len(row) :]
        assert torch.equal(mine[: len(alone)], alone)
        assert (mine[len(alone) :] == 7).all()  # pad_token_id after the row's stop
    ends = [
        ids.shape[1] - len(row) + len(plain(pair.target, ids_of(row), stopping_criteria=criteria)[0])
        for row in rows
    ]
    assert out.shape[1] == max(ends) and min(ends) < max(ends)  # the rows stopped apart
    with pytest.raises(NotImplementedError, match="left padding only.*row 1"):
        spec(
            pair, ids, specrl.StaticController(2), attention_mask=torch.tensor([[1] * 12, [1] * 8 + [0] * 4])
        )


def test_a_draft_with_another_vocabulary_is_refused_with_both_sizes(pair):
    other = random_llama(pair.vocab_size + 8, seed=2)
    with pytest.raises(
        ValueError, match=rf"draft's vocabulary \({pair.vocab_size + 8} .*target's \({pair.vocab_size},"
    ):
        pair.target.generate(
            ids_of([1, 2, 3]), custom_generate=speculative_generate, draft=other, max_new_tokens=4
        )
    padded = pair_from_models(pair.target, other, vocab_size=pair.vocab_size)  # padding rows: the fix
    assert padded.vocab_size == pair.vocab_size
    with pytest.raises(ValueError, match="vocab_size=999"):
        pair_from_models(pair.target, other, vocab_size=999)


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(repetition_penalty=1.3), "RepetitionPenaltyLogitsProcessor"),
        (dict(min_new_tokens=3), "MinNewTokensLengthLogitsProcessor"),
        (dict(num_return_sequences=2, do_sample=True), "one sequence per call"),
        (dict(return_dict_in_generate=True, output_scores=True), "not output_scores"),
    ],
)
def test_options_the_engine_cannot_honour_are_refused(pair, options, message):
    with pytest.raises(NotImplementedError, match=message):
        spec(pair, ids_of([1, 2, 3]), specrl.StaticController(2), n=4, **options)


def test_no_draft_and_a_bad_controller_are_refused(pair):
    with pytest.raises(ValueError, match="needs a draft model"):
        pair.target.generate(ids_of([1, 2, 3]), custom_generate=speculative_generate, max_new_tokens=4)
    with pytest.raises(TypeError, match="controller must be"):
        spec(pair, ids_of([1, 2, 3]), controller=3)


# ---- the benchmark script runs (on the test pair, in seconds) -----------------------------------


@pytest.mark.slow  # a subprocess: about 15 s
def test_bench_hf_generate_quick_run_writes_json_and_markdown(tiny_home, tmp_path):
    from script_runs import run_script

    run_script("bench_hf_generate", "--preset", "tiny", "--prompts-per-domain", 1, "--max-new-tokens", 8,
               "--repeats", 2, "--out", tmp_path / "hf_generate", home=tiny_home[0])  # fmt: skip
    data = json.loads((tmp_path / "hf_generate.json").read_text())
    names = [row["method"] for row in data["rows"]]
    assert "hf plain" in names and any(name.startswith("specrl") for name in names)
    assert all(row["identical_to_plain"] for row in data["rows"])
    assert len(data["runs"]) == 2 * 3 * len(names)  # every row on every prompt (3 domains) in every pass
    assert all(row["ratio_vs_plain_ci95"] is not None for row in data["rows"])  # paired, two passes
    assert all(row["ratio_vs_plain_n"] == 2 for row in data["rows"])
    assert "tokens/s" in (tmp_path / "hf_generate.md").read_text()
