"""A user's prompt file (JSONL or plain text), split deterministically, named by a scenario."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import REPO

from specrl.cli import main
from specrl.envs import load_scenario
from specrl.envs.scenario import SPLITS, PromptSpec, Scenario, ScenarioError
from specrl.envs.scenario.prompt_files import (
    DEFAULT_SPLIT_FRACTIONS,
    PromptFileError,
    read_prompt_file,
    split_of,
    unit_hash,
)
from specrl.envs.trace_store import cache_key
from specrl.traces import TraceSet

EXAMPLE = REPO / "examples" / "prompts"


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def every_text(sets: dict) -> list[str]:
    return [text for split in SPLITS for texts in sets[split].values() for text in texts]


# ---- reading ---------------------------------------------------------------------------------


def test_jsonl_reads_the_named_field_of_each_record_in_order_skipping_blank_lines(tmp_path):
    path = write_jsonl(
        tmp_path / "faq.jsonl",
        [{"q": "def f(x):\n    return", "id": 1}, "", {"q": "How do I reset it?"}, "   "],
    )
    read = read_prompt_file(
        path, text_field="q", domain="faq", fractions={"train": 1, "validation": 0, "test": 0}
    )
    assert read.sets == {
        "train": {"faq": ["def f(x):\n    return", "How do I reset it?"]},
        "validation": {"faq": []},
        "test": {"faq": []},
    }
    assert read.counts == {"faq": {"train": 2, "validation": 0, "test": 0}}


def test_txt_has_one_prompt_per_blank_line_separated_block_with_indentation_kept(tmp_path):
    path = tmp_path / "code.txt"
    path.write_text("def f(x):\n    if x:\n        return 1\n\n\n  \nclass A:\n    pass\n\t\nlast line")
    read = read_prompt_file(path, domain="code", fractions={"train": 0, "validation": 0, "test": 1})
    assert read.sets["test"]["code"] == [
        "def f(x):\n    if x:\n        return 1",
        "class A:\n    pass",
        "last line",
    ]


def test_a_pre_split_file_is_read_as_it_is(tmp_path):
    sets = {"train": {"code": ["a"]}, "test": {"code": ["b"]}}
    (tmp_path / "sets.yaml").write_text(yaml.safe_dump(sets))
    assert read_prompt_file(tmp_path / "sets.yaml").sets == sets
    assert read_prompt_file(tmp_path / "sets.yaml").describe("code") == ""


def test_duplicates_are_dropped_the_first_kept_and_counted_in_a_log_record(tmp_path, caplog):
    path = write_jsonl(
        tmp_path / "d.jsonl",
        [{"text": "a", "d": "x"}, {"text": "b", "d": "x"}, {"text": "a", "d": "y"}, {"text": "a", "d": "x"}],
    )
    with caplog.at_level(logging.INFO, logger="specrl.envs.scenario.prompt_files"):
        read = read_prompt_file(path, domain_field="d", fractions={"train": 1, "validation": 0, "test": 0})
    assert read.sets["train"] == {"x": ["a", "b"], "y": []}
    assert "2 duplicate prompts dropped" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="specrl.envs.scenario.prompt_files"):
        read_prompt_file(write_jsonl(tmp_path / "u.jsonl", [{"text": "a"}]), domain="u")
    assert caplog.text == ""  # quiet without duplicates


def test_the_domain_field_sorts_records_into_domains_present_in_every_split(tmp_path):
    records = [{"text": f"prompt {i}", "kind": "code" if i % 3 else "prose"} for i in range(60)]
    read = read_prompt_file(write_jsonl(tmp_path / "mixed.jsonl", records), domain_field="kind")
    for split in SPLITS:
        assert set(read.sets[split]) == {"code", "prose"}
    assert sorted(every_text({s: {"prose": read.sets[s]["prose"]} for s in SPLITS})) == sorted(
        r["text"] for r in records if r["kind"] == "prose"
    )
    assert sum(read.counts["code"].values()) == 40 and sum(read.counts["prose"].values()) == 20
    assert read.describe("prose").startswith("its 20 prompts of domain 'prose' were split train ")


# ---- the split -------------------------------------------------------------------------------


def test_the_split_is_disjoint_covers_every_prompt_and_follows_the_fractions(tmp_path):
    texts = [f"prompt number {i}" for i in range(1000)]
    path = write_jsonl(tmp_path / "many.jsonl", [{"text": t} for t in texts])
    read = read_prompt_file(path, domain="many")
    parts = {split: read.sets[split]["many"] for split in SPLITS}
    assert sorted(every_text(read.sets)) == sorted(texts)  # every prompt, once
    for split in SPLITS:
        assert len(parts[split]) == pytest.approx(1000 * DEFAULT_SPLIT_FRACTIONS[split], abs=40)
        assert parts[split] == [t for t in texts if t in set(parts[split])]  # file order kept
    skewed = read_prompt_file(path, domain="many", fractions={"train": 0.5, "validation": 0.5, "test": 0})
    assert skewed.counts["many"]["test"] == 0
    assert skewed.counts["many"]["train"] == pytest.approx(500, abs=50)


def test_the_split_is_deterministic_stable_across_runs_and_changes_with_the_seed(tmp_path):
    # a pinned value: Python's hash() would differ between runs (PYTHONHASHSEED); blake2b does not
    assert unit_hash("def add(a, b):", 0) == pytest.approx(0.10622853473661639, abs=1e-15)
    assert [split_of(f"prompt {i}", 0, DEFAULT_SPLIT_FRACTIONS) for i in range(8)] == [
        "validation",
        "train",
        "train",
        "train",
        "train",
        "train",
        "validation",
        "train",
    ]
    texts = [f"prompt {i}" for i in range(200)]
    path = write_jsonl(tmp_path / "p.jsonl", [{"text": t} for t in texts])
    first = read_prompt_file(path, domain="p", seed=0)
    assert read_prompt_file(path, domain="p", seed=0) == first
    assert read_prompt_file(path, domain="p", seed=1).sets != first.sets
    # a prompt's split depends on its text alone: other prompts added or removed move none
    fewer = read_prompt_file(write_jsonl(tmp_path / "q.jsonl", [{"text": t} for t in texts[::3]]), domain="p")
    for split in SPLITS:
        assert fewer.sets[split]["p"] == [t for t in first.sets[split]["p"] if t in texts[::3]]


# ---- errors ----------------------------------------------------------------------------------


def test_a_bad_line_names_its_number_and_a_missing_field_names_the_key_to_set(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"text": "ok"}, "", '{"text": "no end"'])
    with pytest.raises(
        PromptFileError, match=r"bad\.jsonl line 3 is not valid JSON .*one JSON object per line"
    ):
        read_prompt_file(path, domain="bad")
    path = write_jsonl(tmp_path / "field.jsonl", [{"text": "ok"}, {"prompt": "where?"}])
    with pytest.raises(
        PromptFileError, match=r"line 2 has no field 'text' \(its fields: \['prompt'\]\).*text_field"
    ):
        read_prompt_file(path, domain="field")
    with pytest.raises(PromptFileError, match=r"line 1 has no field 'kind'.*prompts\.domain_field"):
        read_prompt_file(path, domain_field="kind")
    with pytest.raises(PromptFileError, match=r"line 1: field 'text' must be a non-empty string, got 5"):
        read_prompt_file(write_jsonl(tmp_path / "n.jsonl", [{"text": 5}]), domain="n")
    with pytest.raises(PromptFileError, match=r"line 1 is not a JSON object"):
        read_prompt_file(write_jsonl(tmp_path / "l.jsonl", [["a"]]), domain="l")


def test_an_empty_file_and_an_unknown_suffix_are_refused(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(PromptFileError, match=r"empty\.jsonl has no prompts: write one JSON object per line"):
        read_prompt_file(tmp_path / "empty.jsonl", domain="empty")
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(PromptFileError, match=r"has no prompts: write prompts separated by blank lines"):
        read_prompt_file(tmp_path / "empty.txt", domain="empty")
    (tmp_path / "p.csv").write_text("a,b\n")
    with pytest.raises(PromptFileError, match=r"ends in \.jsonl .* not '\.csv'"):
        read_prompt_file(tmp_path / "p.csv")
    with pytest.raises(ValueError, match=r"prompts\.file 'p\.csv': a prompt file ends in \.jsonl"):
        PromptSpec(file="p.csv")


# ---- the scenario ----------------------------------------------------------------------------


def scenario_file(tmp_path: Path, prompts: dict, name: str = "mine") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"prompts": prompts, "latency": "constant"}))
    return path


def test_the_yaml_keys_are_parsed_the_domain_defaults_to_the_file_and_misuse_is_refused(tmp_path):
    write_jsonl(tmp_path / "faq.jsonl", [{"question": "q1", "topic": "a"}])
    spec = load_scenario(scenario_file(tmp_path, {"file": "faq.jsonl", "text_field": "question"})).prompts
    assert spec.domains == {"faq": 1.0} and spec.file == str(tmp_path / "faq.jsonl")
    assert spec.text_field == "question" and spec.split_seed == 0
    named = {"file": "faq.jsonl", "file_domain": "support", "split_seed": 3}
    spec = load_scenario(
        scenario_file(tmp_path, {**named, "split_fractions": {"train": 0.8, "validation": 0.1, "test": 0.1}})
    ).prompts
    assert spec.domains == {"support": 1.0} and spec.split_seed == 3 and spec.split_fractions["train"] == 0.8
    refused = {
        "'prompts.domains' is needed with prompts.domain_field": {
            "file": "faq.jsonl",
            "domain_field": "topic",
        },
        "prompts.text_field applies to a .jsonl or .txt prompts.file only": {
            "file": "x.json",
            "text_field": "q",
        },
        "prompts.split_seed applies .*there is no prompts.file": {"split_seed": 1},
        "prompts.text_field names a field of a JSONL record; a .txt file has none": {
            "file": "a.txt",
            "text_field": "q",
        },
        "give domain_field .* or file_domain": {
            "file": "faq.jsonl",
            "domain_field": "t",
            "file_domain": "x",
            "domains": {"x": 1},
        },
        "split_fractions must sum to 1": {
            "file": "faq.jsonl",
            "split_fractions": {"train": 0.8, "validation": 0.1, "test": 0.2},
        },
        r"split_fractions must give each of \['train', 'validation', 'test'\]": {
            "file": "faq.jsonl",
            "split_fractions": {"train": 1},
        },
        "'prompts.split_seed' must be an integer": {"file": "faq.jsonl", "split_seed": "one"},
        "unknown key 'prompts.text_fields'.*Did you mean 'text_field'": {
            "file": "faq.jsonl",
            "text_fields": "q",
        },
    }
    for message, prompts in refused.items():
        with pytest.raises(ScenarioError, match=rf"mine\.yaml: .*{message}"):
            load_scenario(scenario_file(tmp_path, prompts))


def test_the_shipped_example_resolves_to_disjoint_splits_of_its_file_through_prompt_sets():
    scenario = load_scenario(EXAMPLE / "snippets.yaml")
    assert scenario.name == "snippets" and scenario.domains == ["snippets"]
    texts = [json.loads(line)["text"] for line in (EXAMPLE / "snippets.jsonl").read_text().splitlines()]
    pair = scenario.pair.info()  # the embedded pair's name: no weights loaded, no prompts read from it
    sets = {split: scenario.with_overrides(split=split).prompt_sets(pair)["snippets"] for split in SPLITS}
    assert all(sets[split] for split in SPLITS)
    assert sorted(sets["train"] + sets["validation"] + sets["test"]) == sorted(texts)


def test_a_split_with_no_prompts_says_how_the_file_was_split(tmp_path):
    write_jsonl(tmp_path / "few.jsonl", [{"text": f"p{i}"} for i in range(5)])
    fractions = {"train": 1.0, "validation": 0.0, "test": 0.0}
    scenario = load_scenario(scenario_file(tmp_path, {"file": "few.jsonl", "split_fractions": fractions}))
    assert len(scenario.prompt_sets(scenario.pair.info())["few"]) == 5
    expected = (
        r"no 'test' prompts of domain 'few': its 5 prompts of domain 'few' were split train 5, "
        r"validation 0, test 0 \(split_seed 0\); add prompts, or change prompts.split_seed"
    )
    with pytest.raises(ScenarioError, match=expected):
        scenario.with_overrides(split="test").prompt_sets(scenario.pair.info())
    other = load_scenario(scenario_file(tmp_path, {"file": "few.jsonl", "domains": {"code": 1.0}}))
    with pytest.raises(ScenarioError, match=r"of domain 'code' \(domains: \['few'\]\); use one of those"):
        other.prompt_sets(other.pair.info())
    (tmp_path / "few.jsonl").write_text('{"text": "p0"}\n{"txt": "p1"}\n')
    with pytest.raises(ScenarioError, match=r"mine\.yaml: .*few\.jsonl line 2 has no field 'text'"):
        scenario.prompt_sets(scenario.pair.info())


def test_traces_of_a_prompt_file_are_keyed_by_its_contents_and_split(tmp_path):
    path = write_jsonl(tmp_path / "k.jsonl", [{"text": "a"}, {"text": "b"}])
    scenario = load_scenario(scenario_file(tmp_path, {"file": "k.jsonl"}))
    key = cache_key(scenario, "test", 8, 0)
    assert key.startswith("k__test__") and cache_key(scenario, "test", 8, 0) == key
    reseeded = load_scenario(scenario_file(tmp_path, {"file": "k.jsonl", "split_seed": 1}))
    assert cache_key(reseeded, "test", 8, 0) != key
    write_jsonl(path, [{"text": "a"}, {"text": "b, edited"}])
    assert cache_key(scenario, "test", 8, 0) != key
    assert Scenario().prompts.file_digest() is None


def test_collect_traces_records_a_scenario_file_naming_a_jsonl_and_records_again_after_an_edit(
    tiny_home, tmp_path, capsys
):
    home, _ = tiny_home
    for name in ("snippets.yaml", "snippets.jsonl"):
        shutil.copy(EXAMPLE / name, tmp_path / name)
    arguments = ["--scenarios", str(tmp_path / "snippets.yaml"), "--preset", "tiny", "--split", "test"]
    main(["collect", *arguments, "--prompts-per-domain", "1"])
    assert "snippets       test: 1 traces" in capsys.readouterr().out
    folder = home / "traces" / "specrl-zoo-tiny"
    recorded = sorted(folder.glob("snippets__test__*.npz"))
    assert len(recorded) == 1
    traces = TraceSet.load(recorded[0])
    assert [(t.domain, t.prompt_index) for t in traces.traces] == [("snippets", 0)]
    assert traces.meta["pair"] == "specrl-zoo-tiny" and traces.meta["split"] == "test"

    with (tmp_path / "snippets.jsonl").open("a") as f:  # an edit: the cached traces are stale
        f.write(json.dumps({"text": "def added(x):\n"}) + "\n")
    main(["collect", *arguments, "--prompts-per-domain", "1"])
    assert len(sorted(folder.glob("snippets__test__*.npz"))) == 2


# ---- chat requests ---------------------------------------------------------------------------

TEMPLATE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}<assistant>"


def test_chat_prompts_are_decoded_through_the_pairs_chat_template_and_keyed_apart(tmp_path):
    from types import SimpleNamespace

    from specrl.models import ModelPair
    from specrl.selfcheck import word_tokenizer

    write_jsonl(tmp_path / "asks.jsonl", [{"text": f"w{i} w{i + 1}"} for i in range(12)])
    plain = load_scenario(scenario_file(tmp_path, {"file": "asks.jsonl"}))
    chat = load_scenario(scenario_file(tmp_path, {"file": "asks.jsonl", "chat": True}, name="asks"))
    tokenizer = word_tokenizer(16)
    pair = SimpleNamespace(name="words", tokenizer=tokenizer, chat=lambda m: ModelPair.chat(pair, m))
    with pytest.raises(ScenarioError, match=r"asks\.yaml: prompts.chat is set, but .* has no chat"):
        chat.prompt_sets(pair)
    tokenizer.chat_template = TEMPLATE
    messages = plain.prompt_sets(pair)["asks"]
    assert chat.prompt_sets(pair)["asks"] == [f"<user>{m}</user><assistant>" for m in messages]
    assert cache_key(chat, "train", 8, 0) != cache_key(plain, "train", 8, 0)
    assert chat.prompts.file_digest() == plain.prompts.file_digest()  # the file's own key is unchanged


def test_the_smollm2_scenarios_read_their_shipped_requests_as_a_users_file_would():
    records = [json.loads(line) for line in (REPO / "scenarios" / "smollm2_requests.jsonl").open()]
    assert {r["domain"] for r in records} == {"code", "prose", "reasoning"}
    assert all(r["text"] and "licence" in r["source"] or "seeded" in r["source"] for r in records)
    from specrl.pretrained.requests import requests

    distilled = {m for messages in requests(0, 256, 32)["train"].values() for m in messages}
    assert not distilled & {r["text"] for r in records}  # the draft was never distilled on them
    for domain in ("", "_code", "_prose", "_reasoning"):
        for sampling, temperature in (("", 0.0), ("_t1", 1.0)):
            scenario = load_scenario(f"smollm2{sampling}{domain}")
            assert scenario.pair.preset == "smollm2" and scenario.prompts.chat
            assert scenario.prompts.file.endswith("smollm2_requests.jsonl")
            assert scenario.sampling.temperature == temperature
            every = {"code", "prose", "reasoning"}
            assert set(scenario.prompts.domains) == ({domain[1:]} if domain else every)
    sets = load_scenario("smollm2").prompts.read_file()
    counts = {s: sum(map(len, sets.sets[s].values())) for s in SPLITS}
    assert counts == {"train": 252, "validation": 64, "test": 67}
