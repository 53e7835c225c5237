"""One speculative step replayed on a trace: the engine's outcome without running a model.

The ONE definition of how a trace answers an action, used by the trace-replay env (and so by
``VecTraceReplay``, whose rows are that env) and the clairvoyant oracle; see :mod:`specrl.traces` for what a
segment stores and why this reproduces the real loop.
"""

from __future__ import annotations

from typing import NamedTuple

from specrl.engine.types import StopRule
from specrl.traces import Segment


class ReplayedStep(NamedTuple):
    """What the engine would have done: the fields of a StepResult, as plain values."""

    k: int  # k used, after clipping to the room left
    proposed: int
    accepted: int
    emitted: int
    confidences: list[float]
    entropies: list[float]
    acceptance_probs: list[float]
    stopped_by_tau: bool


def room(segment: Segment, position: int, context_window: int) -> int:
    """Tokens the engine may still emit at ``position``: the budget and the context window."""
    return min(segment.budget - position, context_window - segment.prompt_length - position)


def replay_step(
    segment: Segment,
    position: int,
    k: int,
    tau: float,
    accepts: list[bool],
    context_window: int,
    stop: StopRule | None = None,
) -> ReplayedStep:
    """The step at ``position`` of ``segment`` with action (k, tau) and the optional per-token
    ``stop`` rule, asked with each drafted token's recorded signals as the engine asks it.

    ``accepts[j]`` is the realised acceptance of a proposal at position j: greedy, whether the
    draft's argmax is the target's token; sampled, one Bernoulli(accept_prob[j]) draw per
    position, made when the episode starts (each position is proposed at most once, so one
    draw per position has the law of the real loop's draws).
    """
    k = min(k, room(segment, position, context_window) - 1)
    confidences, entropies, acceptance_probs = [], [], []
    rejected = -1  # offset of the first rejected proposal
    stopped = False
    for i in range(k):
        j = position + i
        if rejected < 0:
            confidence, entropy = segment.confidence[j], segment.entropy[j]
        else:
            row = position + rejected
            confidence = segment.off_confidence[row][i - rejected]
            entropy = segment.off_entropy[row][i - rejected]
        confidences.append(confidence)
        entropies.append(entropy)
        if confidence < tau or (stop is not None and stop(i, confidence, entropy)):
            stopped = True
            break
        if rejected < 0 and accepts[j]:
            acceptance_probs.append(segment.accepted_ap[j])
        else:
            if rejected < 0:
                rejected = i
            acceptance_probs.append(segment.off_ap[position + rejected][i - rejected])
    proposed = len(acceptance_probs)
    accepted = rejected if rejected >= 0 else proposed
    emitted = min(accepted + 1, segment.end - position)  # an EOS cuts the step short
    return ReplayedStep(k, proposed, accepted, emitted, confidences, entropies, acceptance_probs, stopped)
