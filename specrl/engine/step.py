"""One speculative iteration: draft, verify, accept losslessly, roll back.

Notation of the papers (Leviathan et al. 2023; Chen et al. 2023): q is the draft's
distribution, p the target's, x_1..x_m the proposed tokens.
"""

from __future__ import annotations

import torch

from specrl.engine.cache import CachedModel
from specrl.engine.sampling import SamplingConfig, entropy
from specrl.engine.timing import DeviceClock
from specrl.engine.types import Action, StepResult


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)), (B, V): the law of the token emitted at the first rejection.

    Where p <= q everywhere (p == q) a rejection has probability 0; p is returned so the
    result is always a distribution.
    """
    excess = (p - q).clamp(min=0)
    total = excess.sum(-1, keepdim=True)
    return torch.where(total > 0, excess / total.clamp_min(1e-30), p)


def speculative_step(
    tokens: torch.Tensor,
    target: CachedModel,
    draft: CachedModel,
    action: Action,
    k: int,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    clock: DeviceClock,
    keep_target_logits: bool = False,
) -> StepResult:
    """Run one iteration on the sequence ``tokens`` (B=1, L) and return what happened.

    Invariant on entry and exit: the target's cache holds every token but the last; the
    draft's cache holds a prefix of the sequence (it catches up on its next forward).
    ``k`` is ``action.k`` clipped by the caller to the room left. ``keep_target_logits`` returns
    the verify forward's logits at the emitted positions too (online draft adaptation learns
    from them: no second target forward).
    """
    length = tokens.shape[1]
    start = clock.now()

    # 1. Draft up to k tokens, stopping before one whose confidence max q is below tau or
    #    that the action's per-token stop rule rejects.
    drafted, q_of_drafted, confidences, entropies = [], [], [], []
    stopped_by_tau = False
    pending = tokens[:, draft.length :]  # tokens the draft has not seen yet, >= 1
    for i in range(k):
        q = sampling.probs(draft.feed(pending)[:, -1])  # (B, V)
        c_i, h_i = q.max(-1).values.item(), entropy(q).item()  # confidence, entropy (nats)
        confidences.append(c_i)
        entropies.append(h_i)
        if c_i < action.tau or (action.stop is not None and action.stop(i, c_i, h_i)):
            stopped_by_tau = True
            break
        x = sampling.choose(q, generator)  # (B,)
        drafted.append(x)
        q_of_drafted.append(q)
        pending = x[:, None]
    m = len(drafted)
    drafted_at = clock.now()

    # 2. Verify: one target forward over the last emitted token plus x_1..x_m -> p_1..p_{m+1}.
    proposal = torch.stack(drafted, 1) if m else tokens.new_empty((tokens.shape[0], 0))
    target_logits = target.feed(torch.cat([tokens[:, target.length :], proposal], 1), m + 1)  # (B, m + 1, V)
    p = sampling.probs(target_logits)

    # 3. Accept x_i while u_i < p_i(x_i) / q_i(x_i); then a correction or bonus token.
    if m:
        q = torch.stack(q_of_drafted, 1)  # (B, m, V)
        if sampling.greedy:
            accept = proposal == p[:, :m].argmax(-1)  # (B, m)
            acceptance_probs = accept.float()
        else:
            p_x = p[:, :m].gather(-1, proposal[..., None])[..., 0]  # (B, m)
            q_x = q.gather(-1, proposal[..., None])[..., 0]  # > 0: x was drawn from q
            acceptance_probs = (p_x / q_x).clamp(max=1.0)
            u = torch.rand(p_x.shape, generator=generator, device=p_x.device)
            accept = u * q_x < p_x
        accepted = int(accept[0].long().cumprod(0).sum())  # the leading run of acceptances
    else:
        acceptance_probs, accepted = proposal.float(), 0
    if accepted < m and not sampling.greedy:
        next_probs = residual(p[:, accepted], q[:, accepted])
    else:
        next_probs = p[:, accepted]  # bonus token from p_{m+1}, or greedy correction
    next_token = sampling.choose(next_probs, generator)  # (B,)

    # 4. Roll back: both caches cut to the accepted prefix (the new token is not fed yet).
    target.rollback(length + accepted)
    draft.rollback(length + accepted)
    emitted = proposal[0, :accepted].tolist() + [int(next_token[0])]
    verified_at = clock.now()

    return StepResult(
        action=action,
        k=k,
        proposed=m,
        accepted=accepted,
        emitted=len(emitted),
        draft_seconds=drafted_at - start,
        verify_seconds=verified_at - drafted_at,
        confidences=confidences,
        entropies=entropies,
        accepted_mask=[i < accepted for i in range(m)],
        acceptance_probs=acceptance_probs[0].tolist(),
        stopped_by_tau=stopped_by_tau,
        context_length=length,
        tokens=emitted,
        target_logits=target_logits[0, : accepted + 1].clone() if keep_target_logits else None,
    )
