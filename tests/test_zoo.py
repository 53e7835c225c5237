"""The embedded pair builds offline, deterministically, atomically, and loads like a hub model."""

from __future__ import annotations

import json

import pytest
import torch

import specrl
from specrl.zoo import build
from specrl.zoo.corpus import build_corpus, math_document


def test_tiny_pair_builds_on_first_use_with_card_and_prompts(tiny_home):
    home, pair = tiny_home
    pair_dir = home / "zoo" / "tiny-seed0"
    card = json.loads((pair_dir / "card.json").read_text())
    assert set(card["heldout"]) == {"code", "prose", "math"}
    for domain, numbers in card["heldout"].items():
        assert numbers["target_loss"] > 0 and 0 <= numbers["agreement"] <= 1, domain
    assert card["draft_trained_on"] == ["code", "prose"]
    assert card["parameters"]["target"] > card["parameters"]["draft"]
    for split in ("train", "heldout"):
        assert all(len(pair.prompts[split][d]) == 8 for d in ("code", "prose", "math"))
    for domain in ("code", "prose", "math"):
        assert not set(pair.prompts["train"][domain]) & set(pair.prompts["heldout"][domain])
    assert not list(pair_dir.parent.glob(".*")), "no temporary build directory is left behind"


def test_tiny_pair_decodes_text(tiny_home):
    _, pair = tiny_home
    out = specrl.SpeculativeDecoder(pair, specrl.StaticController(3)).generate(
        pair.prompts["heldout"]["code"][0], max_new_tokens=12, temperature=1.0, stop_at_eos=False
    )
    assert out.stats.new_tokens == 12 and isinstance(out.text, str) and out.text


def test_build_is_deterministic_for_a_seed(tiny_home, tmp_path):
    home, _ = tiny_home
    again = build("tiny", 0, tmp_path / "again")
    first = specrl.load_pair(target=str(home / "zoo/tiny-seed0/target"),
                             draft=str(again / "draft"), device="cpu")  # same tokenizer: accepted
    rebuilt = specrl.load_pair(target=str(again / "target"), draft=str(again / "draft"), device="cpu")
    for a, b in zip(first.target.parameters(), rebuilt.target.parameters(), strict=True):
        assert torch.equal(a, b)


def test_unknown_preset_is_refused():
    with pytest.raises(ValueError, match="unknown zoo preset 'huge'"):
        specrl.load_pair(preset="huge")


def test_corpus_has_three_domains_and_heldout_files():
    corpus = build_corpus(seed=0, max_files=40, prompts_per_domain=2, heldout_percent=20)
    for split in ("train", "heldout"):
        assert all(corpus.text[split][d] for d in ("code", "prose", "math")), split
    assert "def " in "".join(corpus.text["train"]["code"])
    assert "def " not in "".join(corpus.text["train"]["prose"])[:2000]


def test_math_documents_are_correct_arithmetic():
    import random

    for line in math_document(random.Random(0), lines=50).splitlines():
        left, right = line.split(" = ", 1)
        if "//" in left:
            continue
        assert eval(left) == int(right), line  # noqa: S307 - checking generated arithmetic


def test_shipped_default_pair_loads_without_building(monkeypatch, tmp_path):
    """The default pair ships with the package: loading it builds nothing and needs no hub."""
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pair = specrl.load_pair(device="cpu")
    assert pair.name == "specrl-zoo-small" and not (tmp_path / "zoo").exists()
    assert pair.card["draft_trained_on"] == ["code", "prose"]
    assert pair.target.num_parameters() > 10 * pair.draft.num_parameters()
    assert pair.target.dtype == torch.float32  # stored as float16, computed in fp32 on CPU
    out = specrl.SpeculativeDecoder(pair, specrl.StaticController(4)).generate(
        pair.prompts["heldout"]["code"][0], max_new_tokens=16, stop_at_eos=False
    )
    assert out.stats.new_tokens == 16 and out.stats.accepted > 0
