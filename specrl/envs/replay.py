"""One speculative step replayed on a trace: the engine's outcome without running a model.

The ONE definition of how a trace answers an action, used by the trace-replay env (and so by
``VecTraceReplay``, whose rows are that env) and the clairvoyant oracle; see :mod:`specrl.traces` for what a
segment stores and why this reproduces the real loop.
"""

from __future__ import annotations

from specrl.engine.types import DEFAULT_DRAFTER, Outcome, StopRule
from specrl.traces import Segment
from specrl.traces.format import LookupFields


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
    drafter: str = DEFAULT_DRAFTER,
) -> Outcome:
    """The step at ``position`` of ``segment`` with action (k, tau), the optional per-token
    ``stop`` rule (asked with each drafted token's recorded signals, as the engine asks it) and
    ``drafter`` proposing.

    ``accepts[j]`` is the realised acceptance of a proposal of ``drafter`` at position j
    (:func:`segment_acceptance`): greedy, whether the drafter's argmax is the target's token;
    sampled, one Bernoulli(accept_prob[j]) draw per position, made when the episode starts (each
    position is proposed at most once, so one draw per position has the law of the real loop's
    draws). The n-gram lookup needs none: its proposal is accepted iff it is the trace's token.
    """
    k = min(k, room(segment, position, context_window) - 1)
    fields = segment.fields(drafter)
    if isinstance(fields, LookupFields):
        return _replay_lookup(segment, fields, position, k, tau, stop)
    confidences, entropies, acceptance_probs = [], [], []
    rejected = -1  # offset of the first rejected proposal
    stopped = False
    for i in range(k):
        j = position + i
        if rejected < 0:
            confidence, entropy = fields.confidence[j], fields.entropy[j]
        else:
            row = position + rejected
            confidence = fields.off_confidence[row][i - rejected]
            entropy = fields.off_entropy[row][i - rejected]
        confidences.append(confidence)
        entropies.append(entropy)
        if confidence < tau or (stop is not None and stop(i, confidence, entropy)):
            stopped = True
            break
        if rejected < 0 and accepts[j]:
            acceptance_probs.append(fields.accepted_ap[j])
        else:
            if rejected < 0:
                rejected = i
            acceptance_probs.append(fields.off_ap[position + rejected][i - rejected])
    proposed = len(acceptance_probs)
    accepted = rejected if rejected >= 0 else proposed
    emitted = min(accepted + 1, segment.end - position)  # an EOS cuts the step short
    return Outcome(k, proposed, accepted, emitted, confidences, entropies, acceptance_probs, stopped)


def _replay_lookup(
    segment: Segment, fields: LookupFields, position: int, k: int, tau: float, stop: StopRule | None
) -> Outcome:
    """An n-gram step, as :class:`~specrl.engine.drafters.NGramDrafter` proposes: up to k of the
    tokens the lookup finds, each with confidence 1 and entropy 0 (a point mass), cut by the stop
    rule; fewer found than k counts as a stop, as in the engine."""
    found = min(k, fields.available[position]) if k > 0 else 0
    confidences: list[float] = []
    stopped = found < k
    for i in range(found):
        confidences.append(1.0)
        if tau > 1.0 or (stop is not None and stop(i, 1.0, 0.0)):
            found, stopped = i, True
            break
    accepted = min(found, fields.match[position])
    emitted = min(accepted + 1, segment.end - position)
    return Outcome(
        k,
        found,
        accepted,
        emitted,
        confidences,
        [0.0] * len(confidences),
        fields.ap[position][:found],
        stopped,
    )


def segment_acceptance(
    segment: Segment, drafters: tuple[str, ...], uniforms: list[float]
) -> dict[str, list[bool]]:
    """Per drafter of ``drafters``, whether its proposal at each position of ``segment`` is
    accepted: ``uniforms[j] < accept_prob[j]``, the same uniform for every drafter (common random
    numbers: a choice of drafter changes the outcome only through its own law)."""
    accepts = {}
    for drafter in drafters:
        fields = segment.fields(drafter)
        if not isinstance(fields, LookupFields):
            accepts[drafter] = [u < a for u, a in zip(uniforms, fields.accept_prob, strict=True)]
    return accepts
