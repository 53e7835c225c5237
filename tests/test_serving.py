"""Serving a request stream with online draft adaptation (specrl.serving)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from conftest import VOCAB, prompts

import specrl
from specrl.serving import (
    AdaptationSpec,
    DraftAdapter,
    LiveDraft,
    Segment,
    Setup,
    StreamError,
    StreamSpec,
    TrafficBuffer,
    build_setups,
    draw_requests,
    load_stream,
    serve_request,
    serve_stream,
    shipped_streams,
)

SMALL_PROMPTS = Path(specrl.__file__).parent / "embedded" / "weights" / "small" / "prompts.json"


def word_prompts(n: int, seed: int) -> list[str]:
    return [" ".join(f"w{i}" for i in ids) for ids in prompts(n, VOCAB, seed=seed, length=10)]


PROMPT_SETS = {"test": {"code": word_prompts(8, 1), "math": word_prompts(8, 2)}}


def stream(adaptation: AdaptationSpec | None = None, **changes) -> StreamSpec:
    base = StreamSpec(
        name="words",
        segments=(Segment("first", {"code": 4, "math": 1}), Segment("second", {"math": 5, "code": 2})),
        max_new_tokens=20,
        adaptation=adaptation
        or AdaptationSpec(every=4, window=8, holdout=0.3, steps=6, batch_size=4, lr=3e-3, adapt_below=1.0),
    )
    return replace(base, **changes)


def served_buffer(pair, spec: StreamSpec, count: int) -> TrafficBuffer:
    """The buffer after ``count`` requests served greedily with a static controller, keeping the
    target's logits as an adapting setup does."""
    adapter = DraftAdapter(pair, spec.adaptation, spec.sampling)
    buffer = TrafficBuffer(spec.adaptation.window)
    setup = Setup("s", specrl.StaticController(3), LiveDraft(pair.draft), adapter, buffer)
    for request in draw_requests(spec, PROMPT_SETS)[:count]:
        serve_request(pair, spec, setup, request)
    return setup.buffer


def weights(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def same_weights(model: torch.nn.Module, before: list[torch.Tensor]) -> bool:
    return all(torch.equal(p, b) for p, b in zip(model.parameters(), before, strict=True))


# ---- stream files and arrivals ---------------------------------------------------------------


def test_shipped_stream_draws_each_prompt_once_in_its_segments():
    spec = load_stream("code_math_prose")
    assert "code_math_prose" in shipped_streams()
    requests = draw_requests(spec, json.loads(SMALL_PROMPTS.read_text()))
    assert len(requests) == spec.size == 88
    assert len({r.prompt for r in requests}) == len(requests)  # no prompt served twice
    start = 0
    for segment in spec.segments:  # segments in order, each with exactly its counts
        part = requests[start : start + segment.size]
        assert {r.segment for r in part} == {segment.name}
        assert {d: sum(r.domain == d for r in part) for d in segment.requests} == dict(segment.requests)
        start += segment.size
    held = [r.held_back for r in requests]  # holdout 0.25: one in four, in every stretch
    assert sum(held) == 22 and all(sum(held[i : i + 4]) == 1 for i in range(len(held) - 3))
    assert draw_requests(spec, json.loads(SMALL_PROMPTS.read_text())) == requests  # seeded
    other = draw_requests(replace(spec, seed=1), json.loads(SMALL_PROMPTS.read_text()))
    assert [r.prompt for r in other] != [r.prompt for r in requests]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("segments: [{name: a, requests: {code: 2}}]\nadaptaton: {every: 2}\n", "Did you mean 'adaptation'"),
        ("segments: [{name: a, requests: {code: -1}}]\n", "requests.code must be >= 0"),
        ("segments: []\n", "segments is empty"),
        ("segments: [{name: a, requests: [code]}]\n", "must be a mapping of domains to request counts"),
        ("segments: [{name: a, requests: {code: 2}}]\nadaptation: {holdout: 1.5}\n", "holdout"),
        ("segments: [{name: a, requests: {code: 2}}]\nadaptation: {steps: 0}\n", "adaptation.steps"),
        ("segments: [{name: a, requests: {code: 2}}]\nsplit: heldout\n", "split must be one of"),
    ],
)
def test_bad_stream_files_name_the_key(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(StreamError, match=message):
        load_stream(path)


def test_missing_stream_lists_the_shipped_ones():
    with pytest.raises(StreamError, match="code_math_prose"):
        load_stream("no_such_stream")


def test_more_requests_than_prompts_is_refused():
    spec = stream(segments=(Segment("a", {"code": 9}),))
    with pytest.raises(StreamError, match="asks for 9 'code' requests but the 'test' split has 8"):
        draw_requests(spec, PROMPT_SETS)


# ---- adaptation ------------------------------------------------------------------------------


def test_traffic_buffer_keeps_the_window_and_a_uniform_replay_sample():
    spec = stream()
    requests = draw_requests(replace(spec, segments=(Segment("a", {"code": 8, "math": 8}),)), PROMPT_SETS)
    counts = [0] * 12
    for seed in range(300):
        buffer = TrafficBuffer(window=4, replay=3, seed=seed)
        for request in requests[:16]:
            buffer.add(request, [1, 2], [3])
        assert [e.request.index for e in buffer.recent] == [12, 13, 14, 15]
        kept = [e.request.index for e in buffer.reservoir]
        assert len(kept) == len(set(kept)) == 3 and all(i < 12 for i in kept)
        for i in kept:
            counts[i] += 1
    # each of the 12 evicted requests is kept with probability 3/12: 75 of 300 expected
    assert all(40 < c < 110 for c in counts), counts
    without = TrafficBuffer(window=4)
    for request in requests[:16]:
        without.add(request, [1], [2])
    assert [e.request.index for e in without.entries] == [12, 13, 14, 15]


def test_adaptation_distils_judges_swaps_and_rolls_back(close_pair, monkeypatch):
    spec = stream()
    buffer = served_buffer(close_pair, spec, 8)
    live = LiveDraft(close_pair.draft)
    original = weights(close_pair.draft)
    steps_taken = []
    real_step = torch.optim.AdamW.step
    monkeypatch.setattr(
        torch.optim.AdamW, "step", lambda self, *a, **k: steps_taken.append(1) or real_step(self, *a, **k)
    )
    adapter = DraftAdapter(close_pair, replace(spec.adaptation, steps=25), spec.sampling)

    result = adapter.adapt(live, buffer, after_request=7)

    assert len(steps_taken) == result.steps == 25  # the step budget, all used, never more
    assert result.train_requests + result.held_requests == 8 and result.held_requests > 0
    assert result.candidate_score > result.live_score and result.swapped
    assert live.version == 1 and live.model is not close_pair.draft and live.previous is close_pair.draft
    assert same_weights(close_pair.draft, original)  # the live draft was never trained in place
    held = [e for e in buffer.entries if e.request.held_back]
    assert adapter.acceptance(live.model, held)[0] == pytest.approx(result.candidate_score)
    live.rollback()
    assert live.model is close_pair.draft and live.version == 2
    with pytest.raises(RuntimeError, match="no previous draft"):
        live.rollback()


def test_step_budget_caps_a_small_budget(close_pair, monkeypatch):
    spec = stream(
        adaptation=AdaptationSpec(every=4, window=8, holdout=0.3, steps=3, batch_size=2, adapt_below=1.0)
    )
    buffer = served_buffer(close_pair, spec, 6)
    steps_taken = []
    real_step = torch.optim.AdamW.step
    monkeypatch.setattr(
        torch.optim.AdamW, "step", lambda self, *a, **k: steps_taken.append(1) or real_step(self, *a, **k)
    )
    DraftAdapter(close_pair, spec.adaptation, spec.sampling).adapt(LiveDraft(close_pair.draft), buffer, 5)
    assert len(steps_taken) == 3


def test_a_draft_still_in_its_domain_is_left_alone(close_pair, monkeypatch):
    spec = stream()
    buffer = served_buffer(close_pair, spec, 8)
    steps_taken = []
    real_step = torch.optim.AdamW.step
    monkeypatch.setattr(
        torch.optim.AdamW, "step", lambda self, *a, **k: steps_taken.append(1) or real_step(self, *a, **k)
    )
    adapter = DraftAdapter(close_pair, spec.adaptation, spec.sampling)
    recent = adapter.acceptance(close_pair.draft, list(buffer.entries))[0]
    live = LiveDraft(close_pair.draft)

    above = DraftAdapter(close_pair, replace(spec.adaptation, adapt_below=recent - 0.01), spec.sampling)
    result = above.adapt(live, buffer, after_request=7)
    assert result.reason.startswith("skipped") and result.live_score == pytest.approx(recent)
    assert not steps_taken and live.version == 0

    below = DraftAdapter(close_pair, replace(spec.adaptation, adapt_below=recent + 0.01), spec.sampling)
    assert below.adapt(live, buffer, after_request=7).steps == spec.adaptation.steps == len(steps_taken)
    # the trigger looks only at the requests since the last point: none new, the next call adapts
    assert below.adapt(live, buffer, after_request=7).steps == spec.adaptation.steps


def test_a_nan_update_never_goes_live(close_pair):
    spec = stream()
    buffer = served_buffer(close_pair, spec, 8)
    adapter = DraftAdapter(close_pair, spec.adaptation, spec.sampling)
    for entry in buffer.entries:  # e.g. a half-precision overflow in the teacher's scores
        entry.teacher[3] = float("nan")
    live = LiveDraft(close_pair.draft)
    before = weights(live.model)

    result = adapter.adapt(live, buffer, after_request=7)

    assert not result.swapped and "not finite" in result.reason
    assert live.model is close_pair.draft and live.version == 0 and same_weights(live.model, before)


def test_a_diverging_update_never_goes_live(close_pair):
    spec = stream()
    buffer = served_buffer(close_pair, spec, 8)
    # a learning rate far too large: the loss climbs (finite), held-back acceptance collapses
    adapter = DraftAdapter(close_pair, replace(spec.adaptation, lr=1.0, steps=8), spec.sampling)
    live = LiveDraft(close_pair.draft)
    before = weights(live.model)

    result = adapter.adapt(live, buffer, after_request=7)

    assert result.losses[-1] > 5 * result.losses[0] and "not better" in result.reason and not result.swapped
    assert result.candidate_score < result.live_score
    assert live.model is close_pair.draft and live.version == 0 and same_weights(live.model, before)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_teacher_kept_from_verification_is_the_target_forward(close_pair, temperature):
    """The logits the decoder keeps (one row per generated token, from the verify forwards of a
    speculative run with rejections) equal a teacher-forced forward of the target over the output."""
    spec = stream(sampling=specrl.SamplingConfig(temperature=temperature))
    setup = Setup("s", specrl.StaticController(3), LiveDraft(close_pair.draft), buffer=TrafficBuffer(8))
    setup.adapter = DraftAdapter(close_pair, spec.adaptation, spec.sampling)  # keeps the target's logits
    for request in draw_requests(spec, PROMPT_SETS)[:3]:
        record = serve_request(close_pair, spec, setup, request)
        assert record["proposed"] > record["accepted"]  # rejections happened
    kept = [e.teacher.clone() for e in setup.buffer.entries]
    for entry in setup.buffer.entries:  # one row per generated token (an EOS may end one early)
        assert entry.teacher.shape == (len(entry.token_ids) - entry.prompt_length, close_pair.vocab_size)
    for entry in setup.buffer.entries:
        entry.teacher = None
    setup.adapter.score_with_target(setup.buffer.entries)
    for before, entry in zip(kept, setup.buffer.entries, strict=True):
        torch.testing.assert_close(before.float(), entry.teacher.float(), atol=2e-3, rtol=1e-3)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_held_back_acceptance_is_one_for_the_target_itself(twin_pair, close_pair, temperature):
    spec = stream(sampling=specrl.SamplingConfig(temperature=temperature))
    buffer = served_buffer(close_pair, spec, 6)
    adapter = DraftAdapter(close_pair, spec.adaptation, spec.sampling)
    entries = list(buffer.entries)
    overall, by_domain = adapter.acceptance(close_pair.target, entries)
    assert overall == pytest.approx(1.0, abs=1e-3) and set(by_domain) == {"code", "math"}
    assert adapter.acceptance(close_pair.draft, entries)[0] < 0.99


# ---- the stream served side by side ----------------------------------------------------------


@pytest.fixture(scope="module")
def served(close_pair, tmp_path_factory):
    """The word stream served by plain decoding and frozen/adapted x TCP/static, swaps forced
    (min_gain -1); the records and adaptations reported as they come."""
    spec = stream(
        adaptation=AdaptationSpec(
            every=3, window=8, holdout=0.3, steps=4, batch_size=4, min_gain=-1.0, adapt_below=1.0
        )
    )
    setups = [Setup("plain", specrl.StaticController(0), LiveDraft(close_pair.draft))]
    setups += build_setups(
        close_pair, spec, {"tcp": specrl.TCPController, "static": lambda: specrl.StaticController(4)}
    )
    seen: dict[str, list] = {"requests": [], "adaptations": []}
    serve_stream(
        close_pair,
        spec,
        setups,
        draw_requests(spec, PROMPT_SETS),
        lambda setup, record: seen["requests"].append((setup.name, record["request"])),
        lambda setup, result: seen["adaptations"].append((setup.name, result.after_request)),
        progress=False,
    )
    return spec, setups, seen


def test_greedy_outputs_are_identical_with_and_without_adaptation(served, close_pair):
    spec, setups, _ = served
    plain = setups[0].outputs
    assert len(plain) == spec.size
    for setup in setups[1:]:
        assert setup.outputs == plain, setup.name
    adapted = [s for s in setups if s.adapts]
    assert adapted and all(s.draft.version >= 3 for s in adapted)  # every forced swap happened
    assert all(r["draft_version"] > 0 for s in adapted for r in s.records[3:])
    # and plain decoding is the target's own greedy decoding
    request = draw_requests(spec, PROMPT_SETS)[5]
    out = specrl.SpeculativeDecoder(close_pair, specrl.StaticController(0)).generate(request.prompt, 20)
    assert plain[5] == out.token_ids


def test_adaptations_run_every_n_requests_and_are_reported_as_they_come(served):
    spec, setups, seen = served
    for setup in setups:
        expected = (spec.size - 1) // spec.adaptation.every if setup.adapts else 0
        assert [a.after_request for a in setup.adaptations] == [3 * i + 2 for i in range(expected)]
        assert all(a.seconds > 0 for a in setup.adaptations)
        assert [r for name, r in seen["requests"] if name == setup.name] == list(range(spec.size))
        assert [r for name, r in seen["adaptations"] if name == setup.name] == [
            a.after_request for a in setup.adaptations
        ]


# ---- the command lines, on the embedded tiny pair --------------------------------------------

TINY_STREAM = """
description: "tiny stream"
pair: {preset: tiny}
max_new_tokens: 12
segments:
  - {name: first, requests: {code: 3, prose: 1}}
  - {name: second, requests: {math: 3, code: 1}}
adaptation: {every: 3, window: 8, steps: 2, batch_size: 4, adapt_below: 1.0}
"""


@pytest.mark.slow  # a subprocess serving two seeds: about 30 s
def test_serve_stream_writes_its_pages_and_tensorboard_scalars(tiny_home, tmp_path):
    """serve_stream.py --seeds 0,1 on the tiny pair: a page, plot and JSON per seed, the seeds side
    by side, adaptation time counted in throughput, TensorBoard scalars; --render writes the pages
    again from the JSON."""
    from script_runs import run_script
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    stream_file = tmp_path / "tiny.yaml"
    stream_file.write_text(TINY_STREAM)
    out, runs = tmp_path / "stream", tmp_path / "runs"
    run_script("serve_stream", "--stream", stream_file, "--seeds", "0,1", "--out", out, "--runs", runs,
               "--no-progress", "--threads", 1, home=tiny_home[0])  # fmt: skip
    for seed in (0, 1):
        page = (out / f"seed{seed}" / "stream.md").read_text()
        assert "Greedy outputs identical to plain decoding in every setup: yes." in page
        for title in ("Over the whole stream", "per segment", "Acceptance per domain", "Adaptations"):
            assert title in page
        assert (out / f"seed{seed}" / "stream.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        data = json.loads((out / f"seed{seed}" / "stream.json").read_text())
        assert data["stream"]["seed"] == seed and all(data["outputs_identical_to_plain"].values())
        assert set(data["setups"]) == {
            "plain",
            "frozen + tcp",
            "adapted + tcp",
            "frozen + learned",
            "adapted + learned",
        }
        events = data["adaptations"]["adapted + tcp"]
        assert [a["after_request"] for a in events] == [2, 5]  # after requests 2 and 5 of 8
        adaptations = page[page.index("## Adaptations") :]
        assert sum(line.startswith("| adapted + ") for line in adaptations.splitlines()) == sum(
            len(e) for e in data["adaptations"].values()
        )
        adapted = data["setups"]["adapted + tcp"]
        assert adapted["adaptation_seconds"] == pytest.approx(sum(a["seconds"] for a in events))
        assert adapted["adaptation_seconds"] > 0
        assert adapted["tokens_per_s"] == pytest.approx(
            adapted["tokens"] / (adapted["decode_seconds"] + adapted["adaptation_seconds"])
        )
        assert {r["domain"] for r in data["domains"]} == {"code", "math", "prose"}
    spread = (out / "stream.md").read_text()
    assert "seed 0" in spread and "[seed 1](seed1/stream.md)" in spread
    folder = next(runs.glob("stream__*__seed0__*"))
    run = EventAccumulator(str(folder / "adapted__tcp")).Reload()
    tags = set(run.Tags()["scalars"])
    assert {"specdec/stream/adaptation_seconds", "specdec/stream/cumulative_tokens_per_s"} <= tags
    assert all(tag.startswith("specdec/stream/") for tag in tags)
    assert len(run.Scalars("specdec/stream/tokens_per_s")) == 8
    pages = {path: path.read_text() for path in out.rglob("stream.md")}
    for path in pages:
        path.write_text("stale")
    run_script("serve_stream", "--render", "--out", out)  # the pages again, from the JSON
    assert {path: path.read_text() for path in pages} == pages
