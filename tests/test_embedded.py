"""The embedded pair builds offline, deterministically, atomically, and loads like a hub model."""

from __future__ import annotations

import json

import pytest
import torch
from conftest import reference_greedy

import specrl
from specrl.embedded import build
from specrl.embedded.build import shipped_dir
from specrl.embedded.corpus import PROMPT_DOMAINS, SPLITS, build_corpus, math_document, split_evaluation
from specrl.envs import cached_traces, embedded_scenarios, load_scenario
from specrl.envs.trace_store import DEFAULT_PROMPTS_PER_DOMAIN, cache_key, cache_parts, pool_names
from specrl.traces import TraceError, TraceSet

SHIPPED_PROMPTS = json.loads((shipped_dir("small") / "prompts.json").read_text())


def test_tiny_pair_builds_on_first_use_with_card_and_prompts(tiny_home):
    home, pair = tiny_home
    pair_dir = home / "embedded" / "tiny-seed0"
    card = json.loads((pair_dir / "card.json").read_text())
    assert set(card["heldout"]) == {"code", "prose", "math"}
    for domain, numbers in card["heldout"].items():
        assert numbers["target_loss"] > 0 and 0 <= numbers["agreement"] <= 1, domain
    assert card["draft_trained_on"] == ["code", "prose"]
    assert card["parameters"]["target"] > card["parameters"]["draft"]
    assert all(len(pair.prompts["train"][d]) == 8 for d in ("code", "prose", "math"))
    for split in ("validation", "test"):  # 8 held-out prompts dealt into blocks of 4
        assert all(len(pair.prompts[split][d]) == 4 for d in ("code", "prose", "math"))
    for domain in ("code", "prose", "math"):
        splits = [set(pair.prompts[s][domain]) for s in ("train", "validation", "test")]
        assert not (splits[0] & splits[1] or splits[0] & splits[2] or splits[1] & splits[2]), domain
    assert not list(pair_dir.parent.glob(".*")), "no temporary build directory is left behind"
    # the second draft, of another size: distilled the same way, recorded in the card, loaded
    assert card["draft-mid"]["parameters"] == pair.mid.num_parameters() != card["parameters"]["draft"]
    assert set(card["draft-mid"]["heldout"]) == {"code", "prose", "math"}
    assert pair.mid.config.num_hidden_layers == 2


def test_a_cached_pair_without_its_mid_draft_gets_one_distilled_into_it(tiny_home, tmp_path, monkeypatch):
    import shutil

    from specrl.embedded import ensure_pair

    home, _ = tiny_home
    copy = tmp_path / "embedded" / "tiny-seed0"
    shutil.copytree(home / "embedded" / "tiny-seed0", copy)
    shutil.rmtree(copy / "draft-mid")
    card = json.loads((copy / "card.json").read_text())
    del card["draft-mid"]
    (copy / "card.json").write_text(json.dumps(card))
    target_before = (copy / "target" / "model.safetensors").read_bytes()
    monkeypatch.setenv("SPECRL_HOME", str(tmp_path))
    assert ensure_pair("tiny", 0) == copy
    assert (copy / "draft-mid" / "config.json").is_file() and "draft-mid" in json.loads(
        (copy / "card.json").read_text()
    )
    assert (copy / "target" / "model.safetensors").read_bytes() == target_before  # left as it was
    original = (home / "embedded" / "tiny-seed0" / "draft-mid" / "model.safetensors").read_bytes()
    assert (copy / "draft-mid" / "model.safetensors").read_bytes() == original  # deterministic for the seed
    assert not list(copy.glob(".*")), "no temporary directory is left behind"


def test_tiny_pair_decodes_text(tiny_home):
    """The built pair round-trips text through its tokenizer, and speculative greedy decoding with
    it gives the target's own greedy continuation, as text."""
    _, pair = tiny_home
    prompt = pair.prompts["test"]["code"][0]
    out = specrl.SpeculativeDecoder(pair, specrl.StaticController(3)).generate(
        prompt, max_new_tokens=12, stop_at_eos=False
    )
    assert out.prompt_ids == pair.encode(prompt) and pair.tokenizer.decode(out.prompt_ids) == prompt
    assert out.token_ids == reference_greedy(pair.target, out.prompt_ids, 12, vocab_size=pair.vocab_size)
    assert out.text == pair.tokenizer.decode(out.token_ids) and out.stats.proposed > 0


@pytest.mark.slow
def test_build_is_deterministic_for_a_seed(tiny_home, tmp_path):
    home, _ = tiny_home
    again = build("tiny", 0, tmp_path / "again")
    first = specrl.load_pair(
        target=str(home / "embedded/tiny-seed0/target"), draft=str(again / "draft"), device="cpu"
    )  # same tokenizer: accepted
    rebuilt = specrl.load_pair(target=str(again / "target"), draft=str(again / "draft"), device="cpu")
    for a, b in zip(first.target.parameters(), rebuilt.target.parameters(), strict=True):
        assert torch.equal(a, b)


def test_unknown_preset_is_refused():
    with pytest.raises(ValueError, match="unknown pair preset 'huge'"):
        specrl.load_pair(preset="huge")


def test_corpus_has_three_domains_and_heldout_files():
    corpus = build_corpus(seed=0, max_files=40, prompts_per_domain=2, heldout_percent=20)
    for split in ("train", "heldout"):
        assert all(corpus.text[split][d] for d in ("code", "prose", "math")), split
    assert "def " in "".join(corpus.text["train"]["code"])
    assert "def " not in "".join(corpus.text["train"]["prose"])[:2000]


def test_corpus_cuts_prompts_of_the_prompt_only_domains():
    corpus = build_corpus(seed=0, max_files=40, prompts_per_domain=4, heldout_percent=20)
    assert set(corpus.prompts) == set(SPLITS)
    for name, source in PROMPT_DOMAINS.items():
        if not source.files()[1]:
            continue  # its files are absent on this machine: no prompts (documented)
        assert {s for s in SPLITS if corpus.prompts[s].get(name)} == set(source.splits), name
        assert name not in corpus.text["train"]  # never training text of the models
    assert set(corpus.sources) >= {"code", "prose", "math", *PROMPT_DOMAINS}


def test_held_out_prompts_are_dealt_into_test_and_validation_blocks():
    dealt = split_evaluation(list(range(32)))
    assert dealt["test"] == [*range(0, 8), *range(16, 24)]
    assert dealt["validation"] == [*range(8, 16), *range(24, 32)]
    assert split_evaluation(list(range(8))) == {"test": [0, 1, 2, 3], "validation": [4, 5, 6, 7]}


def test_shipped_prompts_have_three_disjoint_splits_and_one_unseen_test_domain():
    assert set(SHIPPED_PROMPTS) == {*SPLITS, "sources"}
    domains = {d for split in SPLITS for d in SHIPPED_PROMPTS[split]}
    assert set(SHIPPED_PROMPTS["sources"]) == domains
    for domain in domains:
        sets = [set(SHIPPED_PROMPTS[split].get(domain, [])) for split in SPLITS]
        assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2]), domain
        assert len(sets[2]) >= DEFAULT_PROMPTS_PER_DOMAIN["test"], domain
    unseen = [d for d in domains if d not in SHIPPED_PROMPTS["train"]]
    assert unseen == ["license"] and "license" not in SHIPPED_PROMPTS["validation"]
    assert {"c_header", "perl"} <= set(SHIPPED_PROMPTS["train"]) & set(SHIPPED_PROMPTS["validation"])


def test_every_shipped_scenario_ships_its_traces_for_each_split_it_has_prompts_in():
    folder = shipped_dir("small") / "traces"
    embedded = embedded_scenarios()
    assert "mixed" in embedded and "smollm2" not in embedded  # the smollm2 pair ships no traces
    for name in embedded:
        for part in cache_parts(load_scenario(name)):
            for split in SPLITS:
                if not all(SHIPPED_PROMPTS[split].get(d) for d in part.domains):
                    continue
                n = DEFAULT_PROMPTS_PER_DOMAIN[split]
                # a scenario of some of the pool's drafters replays the whole pool's traces
                names = [cache_key(part, split, n, 0) + ".npz", *pool_names(part, split, n, 0)]
                path = next((folder / f for f in names if (folder / f).is_file()), folder / names[0])
                assert path.is_file(), f"{name}/{split}: no shipped {names}"
                traces = TraceSet.load(path)
                assert traces.meta["split"] == split and len(traces) == n * len(
                    [d for d, w in part.prompts.domains.items() if w > 0]
                ), path.name
    assert not list(folder.glob("*__heldout__*")), "held-out files are split into validation and test"


def test_an_unknown_split_is_refused_naming_the_splits():
    with pytest.raises(TraceError, match=r"unknown prompt split 'heldout'.*'test', 'train', 'validation'"):
        cached_traces(load_scenario("code"), "heldout", pair=None)


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
        pair.prompts["test"]["code"][0], max_new_tokens=16, stop_at_eos=False
    )
    assert out.stats.new_tokens == 16 and out.stats.accepted > 0
