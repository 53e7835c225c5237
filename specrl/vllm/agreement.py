"""Do vLLM's recorded steps replay exactly on their traces? (issue 53, item 3)

A request served through vLLM with recording on (:mod:`specrl.vllm.recorder`) holds, per verified
step, the action the proposer took (drafter, k, tau) and the count vLLM accepted. Its trace
(:mod:`specrl.vllm.collect`) is vLLM's output analysed teacher-forced. :func:`replay_agreement`
replays each recorded action at the recorded position with the trace-replay env's own step
(:func:`~specrl.envs.replay.replay_step`, its acceptance draws from
:func:`~specrl.envs.trace_replay.realise_acceptance`) and counts the steps whose accepted count
equals vLLM's.

Greedy, the n-gram lookup agrees by construction: its proposal is a function of the tokens, and the
trace's tokens are vLLM's. The draft model agrees where its KV-cached forwards inside vLLM pick the
same argmax (and clear the same tau) as the teacher-forced forward of the analysis: on near-ties
they may not, and the share says how often. Sampled traces replay in distribution only (one stored
draw per position), so their share is not expected to be 1.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

import numpy as np

from specrl.envs.replay import replay_step, room
from specrl.envs.trace_replay import realise_acceptance
from specrl.traces.format import Trace, TraceError, TraceSet
from specrl.vllm.recorder import RecordedRequest

EXAMPLES = 10  # disagreements quoted in the report


def replay_agreement(traces: TraceSet, requests: Sequence[RecordedRequest | None]) -> dict[str, Any]:
    """Replay every recorded step of ``requests[i]`` on trace i of ``traces`` (None: that trace's
    request was not recorded) and compare with what vLLM did.

    Returns:
        ``requests`` replayed, ``steps`` with an action, ``agree`` (accepted counts equal) and
        ``share``; the same for the steps that drafted (k > 0) as ``drafted_steps``,
        ``drafted_agree``, ``drafted_share``; per drafter its ``steps``, ``agree``, ``share`` and
        ``proposed_agree`` (the tokens proposed equal too) and ``past_budget`` (steps where vLLM,
        which does not tell the proposer a request's budget, drafted past it: its counts are
        compared up to the budget, as the replay cuts k there); ``token_mismatches``: steps whose
        emitted tokens (up to the trace's end) differ from the trace's (0 when the trace is the
        request's output);
        ``greedy``; and up to :data:`EXAMPLES` ``disagreements``.

    Raises:
        TraceError: a request whose output does not fit its trace (another trace, or a trace
            without the fields of a drafter the request used).
    """
    if len(requests) != len(traces):
        raise ValueError(f"{len(requests)} recordings for {len(traces)} traces: give one per trace (or None)")
    window = int(traces.meta["context_window"])
    tally: dict[str, Counter] = {}  # per drafter, and "drafted": the steps with k > 0
    mismatched, examples, replayed = 0, [], 0
    for index, (trace, request) in enumerate(zip(traces.traces, requests, strict=True)):
        if request is None:
            continue
        replayed += 1
        for step in _replayed_steps(index, trace, request, window):
            mismatched += not step["tokens_agree"]
            if "accepted" not in step:  # its first step: no proposal verified
                continue
            agree = step["accepted"] == step["replayed_accepted"]
            for key in (step["drafter"], "drafted") if step["k"] else (step["drafter"],):
                counts = tally.setdefault(key, Counter())
                counts["steps"] += 1
                counts["agree"] += agree
                counts["proposed_agree"] += step["proposed"] == step["replayed_proposed"]
                counts["past_budget"] += step["past_budget"]
            if not agree and len(examples) < EXAMPLES:
                examples.append({key: value for key, value in step.items() if key != "tokens_agree"})
    drafted = tally.pop("drafted", Counter())
    steps = sum(c["steps"] for c in tally.values())
    agree = sum(c["agree"] for c in tally.values())
    return {
        "requests": replayed,
        "steps": steps,
        "agree": agree,
        "share": _share(agree, steps),
        "drafted_steps": drafted["steps"],
        "drafted_agree": drafted["agree"],
        "drafted_share": _share(drafted["agree"], drafted["steps"]),
        "by_drafter": {name: _shared(counts) for name, counts in sorted(tally.items())},
        "token_mismatches": mismatched,
        "greedy": traces.greedy,
        "disagreements": examples,
    }


def _replayed_steps(index: int, trace: Trace, request: RecordedRequest, window: int) -> list[dict[str, Any]]:
    """Each recorded step of ``request`` beside the trace's answer to its action, at its position."""
    if len(trace.segments) != 1:
        raise TraceError(f"trace {index} has {len(trace.segments)} segments; a vLLM request has one")
    segment = trace.segments[0]
    if segment.prompt_length != len(request.prompt):
        raise TraceError(
            f"trace {index} has a prompt of {segment.prompt_length} tokens, its recorded request "
            f"{request.number} one of {len(request.prompt)}: the recordings are not this set's requests"
        )
    used = tuple(dict.fromkeys(step["drafter"] for step in request.steps if "drafter" in step))
    for drafter in used:
        segment.fields(drafter)  # a TraceError names the drafters the trace holds
    accepts = realise_acceptance(trace, np.random.default_rng(trace.seed), used)[0]
    position, out = 0, []
    for step in request.steps:
        emitted = list(step["emitted"])
        kept = emitted[: segment.end - position]  # vLLM drops what runs past the budget or an EOS
        row = {
            "trace": index,
            "request": request.number,
            "position": position,
            "tokens_agree": kept == segment.tokens[position : position + len(kept)],
        }
        if "drafter" in step:
            drafter, k, tau = step["drafter"], int(step["k"]), float(step["tau"])
            outcome = replay_step(segment, position, k, tau, accepts.get(drafter, ()), window, None, drafter)
            # vLLM's proposer does not know a request's budget: it may draft past it, where the
            # replay (as specrl's engine) cuts k; vLLM keeps no more than the replay can accept.
            most = room(segment, position, window) - 1
            row |= {
                "drafter": drafter,
                "k": k,
                "tau": tau,
                "past_budget": k > most,
                "proposed": min(len(step["proposed"]), most),
                "accepted": min(int(step["accepted"]), most),
                "replayed_proposed": outcome.proposed,
                "replayed_accepted": outcome.accepted,
            }
        out.append(row)
        position += len(emitted)
    return out


def _shared(counts: Counter) -> dict[str, Any]:
    return {**counts, "share": _share(counts["agree"], counts["steps"])}


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None
