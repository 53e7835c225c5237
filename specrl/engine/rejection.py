"""The lossless accept/reject rule of speculative sampling, for any proposal law q.

Notation of the papers (Leviathan et al. 2023; Chen et al. 2023): q is the proposal's
distribution, p the verifier's, x_1..x_m the proposed tokens. The rule holds whatever q is, as
long as each x_i was drawn from q_i given the tokens before it: a model draft's softmax, the
point mass of an n-gram lookup, or a cascade's middle model. The engine verifies proposals
against the target with it, and a cascade verifies its small draft against its middle model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specrl.engine.sampling import SamplingConfig


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)), (B, V): the law of the token emitted at the first rejection.

    Where p <= q everywhere (p == q) a rejection has probability 0; p is returned so the
    result is always a distribution.
    """
    excess = (p - q).clamp(min=0)
    total = excess.sum(-1, keepdim=True)
    return torch.where(total > 0, excess / total.clamp_min(1e-30), p)


@dataclass
class Judgement:
    """The outcome of verifying m proposed tokens, on the device (no host read made).

    Attributes:
        accepted: () long, a: the leading run of accepted proposals (row 0).
        next_token: (B,) the token after them: the correction drawn from the residual at the
            first rejection, or the bonus from p_{m+1} (greedy: the argmax of p_{a+1}).
        acceptance_probs: (B, m) min(1, p_i(x_i) / q_i(x_i)); greedy: 1 where x_i = argmax p_i.
    """

    accepted: torch.Tensor
    next_token: torch.Tensor
    acceptance_probs: torch.Tensor


def judge(
    proposal: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
) -> Judgement:
    """Accept x_i while u_i < p_i(x_i) / q_i(x_i); then a correction or bonus token. All on the
    device: the engine reads the outcome to the host once per step, with the emitted tokens.

    Args:
        proposal: (B, m) the proposed tokens x_1..x_m.
        q: (B, m, V) the law each x_i was drawn from.
        p: (B, m + 1, V) the verifier's distributions p_1..p_{m+1}, processed by ``sampling``.
    """
    m = proposal.shape[1]
    if not m:
        return Judgement(proposal.new_zeros(()), sampling.choose(p[:, 0], generator), proposal.float())
    if sampling.greedy:
        accept = proposal == p[:, :m].argmax(-1)  # (B, m)
        acceptance_probs = accept.float()
    else:
        p_x = p[:, :m].gather(-1, proposal[..., None])[..., 0]  # (B, m)
        q_x = q.gather(-1, proposal[..., None])[..., 0]  # > 0: x was drawn from q
        acceptance_probs = (p_x / q_x).clamp(max=1.0)
        u = torch.rand(p_x.shape, generator=generator, device=p_x.device)
        accept = u * q_x < p_x
    accepted = accept[0].long().cumprod(0).sum()  # the leading run of acceptances
    p_next = p.index_select(1, accepted.view(1))[:, 0]  # p_{a+1}
    if not sampling.greedy:  # a rejection at a <= m - 1 draws from the residual there; else the bonus
        q_next = q.index_select(1, accepted.clamp(max=m - 1).view(1))[:, 0]
        p_next = torch.where(accepted < m, residual(p_next, q_next), p_next)
    return Judgement(accepted, sampling.choose(p_next, generator), acceptance_probs)


def read_outcomes(
    judgements: list[Judgement], proposals: list[torch.Tensor]
) -> list[tuple[int, int, list[int], list[float]]]:
    """Each judgement's row 0 read to the host in one read: (accepted, next token, the proposed
    tokens, their acceptance probabilities), for proposals (1, m) each. Packed in float32, the
    probabilities' own dtype, which holds token ids exactly (vocabularies are below 2**24) and
    which every device supports (MPS has no float64)."""
    packed = [
        torch.cat(
            [
                judgement.accepted.view(1).float(),
                judgement.next_token[:1].float(),
                proposal[0].float(),
                judgement.acceptance_probs[0].float(),
            ]
        )
        for judgement, proposal in zip(judgements, proposals, strict=True)
    ]
    values = torch.cat(packed).tolist()
    outcomes, start = [], 0
    for proposal in proposals:
        m = proposal.shape[1]
        row = values[start : start + 2 + 2 * m]
        outcomes.append((int(row[0]), int(row[1]), [int(x) for x in row[2 : 2 + m]], row[2 + m :]))
        start += 2 + 2 * m
    return outcomes
