"""One speculative iteration: draft, verify, accept losslessly, roll back.

Notation of the papers (Leviathan et al. 2023; Chen et al. 2023): q is the drafter's
distribution, p the target's, x_1..x_m the proposed tokens.
"""

from __future__ import annotations

import torch

from specrl.engine.cache import KVCache
from specrl.engine.drafters.base import Drafter
from specrl.engine.rejection import judge, read_outcomes
from specrl.engine.sampling import SamplingConfig
from specrl.engine.timing import DeviceClock
from specrl.engine.types import Action, StepResult


def speculative_step(
    tokens: torch.Tensor,
    target: KVCache,
    drafter: Drafter,
    action: Action,
    k: int,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    clock: DeviceClock,
    keep_target_logits: bool = False,
) -> StepResult:
    """Run one iteration on the sequence ``tokens`` (B=1, L) and return what happened.

    Invariant on entry and exit: the target's cache holds every token but the last; the
    drafter's state covers a prefix of the sequence (it catches up on its next proposal).
    ``k`` is ``action.k`` clipped by the caller to the room left. ``keep_target_logits`` returns
    the verify forward's logits at the emitted positions too (online draft adaptation learns
    from them: no second target forward).
    """
    length = tokens.shape[1]
    start = clock.now()

    # 1. Draft up to k tokens, each x_i ~ q_i, stopping before a token whose confidence max q is
    #    below tau or that the action's per-token stop rule rejects.
    proposal = drafter.propose(tokens, k, action, sampling, generator)
    m = proposal.m
    drafted_at = clock.now()

    # 2. Verify: one target forward over the last emitted token plus x_1..x_m -> p_1..p_{m+1}.
    target_logits = target.feed(
        torch.cat([tokens[:, target.length :], proposal.tokens], 1), m + 1
    )  # (B, m + 1, V)
    p = sampling.probs(target_logits)

    # 3. Accept x_i while u_i < p_i(x_i) / q_i(x_i); then a correction or bonus token.
    judgement = judge(proposal.tokens, proposal.q, p, sampling, generator)
    ((accepted, next_token, drafted, acceptance_probs),) = read_outcomes([judgement], [proposal.tokens])

    # 4. Roll back: the target and the drafter cut to the accepted prefix (the new token is not fed yet).
    target.rollback(length + accepted)
    drafter.rollback(length + accepted)
    emitted = drafted[:accepted] + [next_token]
    verified_at = clock.now()

    return StepResult(
        action=action,
        k=k,
        proposed=m,
        accepted=accepted,
        emitted=len(emitted),
        draft_seconds=drafted_at - start,
        verify_seconds=verified_at - drafted_at,
        confidences=proposal.confidences,
        entropies=proposal.entropies,
        accepted_mask=[i < accepted for i in range(m)],
        acceptance_probs=acceptance_probs,
        stopped_by_tau=proposal.stopped,
        context_length=length,
        tokens=emitted,
        target_logits=target_logits[0, : accepted + 1].clone() if keep_target_logits else None,
    )
