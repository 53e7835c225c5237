"""Recording through vLLM, the parts that run without it: the replay agreement of a hand-made
recording on a hand-made trace, requests matched to prompts, the recording folder, the shifts
refused, and ``specrl collect --engine vllm`` where vLLM is missing (tests/in_vllm/ serves for real)."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace

import pytest

from specrl.envs import load_scenario
from specrl.envs.recording import TraceJob
from specrl.envs.scenario import SetupError
from specrl.envs.trace_store import cache_key
from specrl.traces.format import LookupFields, Segment, Trace, TraceError, TraceSet
from specrl.vllm.agreement import replay_agreement
from specrl.vllm.collect import ServedPrompt, matched_requests, recording_folder, refuse_shifts
from specrl.vllm.recorder import RecordedRequest

K_MAX = 4
PROMPT = [1, 2, 3, 4]
TOKENS = [5, 6, 7, 8, 9, 10, 11, 12]  # the request's output: 8 tokens, its whole budget


def segment(lookup_match: list[int]) -> Segment:
    """A greedy segment of TOKENS after PROMPT: the draft is right at even positions only, the
    lookup finds 3 tokens everywhere, of which ``lookup_match[j]`` lead the output."""
    n, right = len(TOKENS), [float(j % 2 == 0) for j in range(len(TOKENS))]
    zeros = [[0.0] * K_MAX for _ in range(n)]
    return Segment(
        prompt_length=len(PROMPT),
        budget=n,
        end=n,
        eos=False,
        tokens=TOKENS,
        confidence=[0.9] * n,
        entropy=[0.1] * n,
        accept_prob=right,
        accepted_ap=[1.0] * n,
        off_confidence=[[0.9] * K_MAX for _ in range(n)],
        off_entropy=zeros,
        off_ap=zeros,
        others={"ngram": LookupFields([3] * n, [2] * n, lookup_match, [[1.0] * K_MAX for _ in range(n)])},
    )


def traces(lookup_match: list[int]) -> TraceSet:
    meta = {
        "pair": "hand-made",
        "scenario": "hand-made",
        "split": "test",
        "k_max": K_MAX,
        "sampling": {"temperature": 0.0, "top_k": 0, "top_p": 1.0},
        "context_window": 64,
        "vocab_size": 32,
        "max_new_tokens": len(TOKENS),
        "drafters": ["draft", "ngram"],
    }
    return TraceSet.from_traces([Trace("code", 0, 7, [segment(lookup_match)])], meta)


def recording() -> RecordedRequest:
    """What the proposer recorded of the request: the prefill's token, then per verified step the
    action taken at the tokens emitted so far and what vLLM accepted."""

    def step(drafter: str, k: int, proposed: list[int], accepted: int, emitted: list[int]) -> dict:
        return {"request": 0, "drafter": drafter, "k": k, "tau": 0.0, "proposed": proposed,
                "accepted": accepted, "emitted": emitted}  # fmt: skip

    return RecordedRequest(
        0,
        PROMPT,
        [
            {"request": 0, "prompt": PROMPT, "emitted": [5]},
            step("ngram", 3, [6, 7, 0], 2, [6, 7, 8]),  # position 1: the lookup leads by 2
            step("draft", 2, [9, 0], 1, [9, 10]),  # position 4: right at 4, wrong at 5
            step("draft", 0, [], 0, [11]),  # position 6: k = 0
            # position 7, one token of budget left: vLLM, not told the budget, drafted past it
            step("ngram", 3, [12, 13, 14], 3, [12, 13, 14, 15]),
        ],
    )


def test_recorded_steps_that_the_trace_answers_alike_agree_and_the_budget_cuts_both():
    agreement = replay_agreement(traces([0, 2, 0, 0, 0, 0, 0, 0]), [recording()])
    assert agreement["requests"] == 1 and agreement["steps"] == 4 and agreement["share"] == 1.0
    assert agreement["drafted_steps"] == 3 and agreement["drafted_share"] == 1.0
    assert agreement["by_drafter"]["ngram"] == {
        "steps": 2, "agree": 2, "proposed_agree": 2, "past_budget": 1, "share": 1.0
    }  # fmt: skip
    assert agreement["by_drafter"]["draft"]["share"] == 1.0
    assert agreement["token_mismatches"] == 0 and agreement["disagreements"] == [] and agreement["greedy"]


def test_a_step_the_trace_answers_otherwise_is_counted_and_quoted():
    agreement = replay_agreement(traces([0, 1, 0, 0, 0, 0, 0, 0]), [recording()])  # the lookup leads by 1
    assert agreement["agree"] == 3 and agreement["share"] == 0.75
    assert agreement["by_drafter"]["ngram"]["share"] == 0.5
    (wrong,) = agreement["disagreements"]
    assert (wrong["position"], wrong["drafter"], wrong["accepted"], wrong["replayed_accepted"]) == (
        1,
        "ngram",
        2,
        1,
    )


def test_an_unrecorded_request_is_left_out_and_a_foreign_one_refused():
    assert replay_agreement(traces([0] * 8), [None])["requests"] == 0
    foreign = replace(recording(), prompt=PROMPT + [4])
    with pytest.raises(TraceError, match="prompt of 4 tokens"):
        replay_agreement(traces([0] * 8), [foreign])
    with pytest.raises(ValueError, match="one per trace"):
        replay_agreement(traces([0] * 8), [])


def test_output_past_the_trace_is_a_token_mismatch():
    changed = recording()
    changed.steps[3] = {**changed.steps[3], "emitted": [99]}
    assert replay_agreement(traces([0, 2, 0, 0, 0, 0, 0, 0]), [changed])["token_mismatches"] == 1


def test_recordings_are_matched_to_prompts_by_their_tokens_equal_ones_in_order():
    job = TraceJob(0, "code", 0, 0)
    prompts = [ServedPrompt(job, [1, 2], 8), ServedPrompt(job, [3], 8), ServedPrompt(job, [1, 2], 8)]
    first, second = RecordedRequest(0, [1, 2], []), RecordedRequest(1, [1, 2], [])
    assert matched_requests(prompts, [first, second]) == [first, None, second]


def test_a_recording_folder_is_named_after_its_trace_file_and_starts_empty(tmp_path):
    scenario = load_scenario("code_lookup")
    folder = recording_folder(tmp_path, scenario, "test", 4, 0)
    assert folder.name == cache_key(scenario, "test", 4, 0) + ".vllm"
    (folder / "steps.jsonl").write_text("{}\n")
    (folder / "notes.txt").write_text("mine")
    again = recording_folder(tmp_path, scenario, "test", 4, 0)
    assert again == folder and sorted(p.name for p in folder.iterdir()) == ["notes.txt"]


def test_a_scenario_that_shifts_domain_is_refused_naming_specrls_engine():
    with pytest.raises(SetupError, match="specrl collect --scenarios code_to_math"):
        refuse_shifts(load_scenario("code_to_math"))
    refuse_shifts(load_scenario("code_lookup"))


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_collect_through_vllm_without_it_names_the_install(capsys):
    from specrl.cli import main
    from specrl.vllm.compat import INSTALL

    with pytest.raises(SystemExit) as exit_info:
        main(["collect", "--engine", "vllm", "--scenarios", "code_lookup", "--split", "test"])
    assert exit_info.value.code == 2 and INSTALL in capsys.readouterr().err


def test_collect_through_vllm_refuses_ray(capsys):
    from specrl.cli import main

    with pytest.raises(SystemExit):
        main(["collect", "--engine", "vllm", "--ray", "--scenarios", "code_lookup"])
    assert "leave out --ray" in capsys.readouterr().err


def test_the_hand_made_traces_round_trip(tmp_path):
    """The hand-made set is a valid trace file (the agreement reads what the env reads)."""
    loaded = TraceSet.load(traces([0] * 8).save(tmp_path / "t.npz"))
    assert loaded.traces[0].segments[0].fields("ngram").available == [3] * 8
    assert json.loads(json.dumps(loaded.meta))["drafters"] == ["draft", "ngram"]
