"""The lossless accept/reject rule of speculative sampling (Leviathan et al. 2023; Chen et al.
2023), for any proposal law q, as long as each x_i was drawn from q_i given the tokens before it;
p is the verifier's law. The engine verifies against the target with it, a cascade its small
draft against its middle model.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specrl.engine.sampling import SamplingConfig


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """norm(max(0, p - q)), (B, V): the law of the token emitted at the first rejection (p where
    p == q, whose rejection has probability 0)."""
    excess = (p - q).clamp(min=0)
    total = excess.sum(-1, keepdim=True)
    return torch.where(total > 0, excess / total.clamp_min(1e-30), p)


@dataclass
class Judgement:
    """The outcome of verifying each row's proposals, on the device (no host read made).

    Attributes:
        accepted: (B,) long, a_r: the leading run of row r's accepted proposals.
        next_token: (B,) the token after them: the correction drawn from the residual at the
            first rejection, or the bonus from p_{m+1} (greedy: the argmax of p_{a+1}).
        acceptance_probs: (B, w) min(1, p_i(x_i) / q_i(x_i)); greedy: 1 where x_i = argmax p_i.
    """

    accepted: torch.Tensor
    next_token: torch.Tensor
    acceptance_probs: torch.Tensor


def judge(
    proposal: torch.Tensor,
    proposed: list[int],
    q: torch.Tensor,
    p: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
) -> Judgement:
    """Accept x_i while u_i < p_i(x_i) / q_i(x_i); then a correction or bonus token. Every row at
    once, on the device; uniforms for the whole (B, w) block, then one draw per row.

    Args:
        proposal: (B, w) the proposed tokens x_1..x_m of each row, right-padded to w = max m.
        proposed: m_r, the proposals of row r (its first m_r columns).
        q: (B, w, V) the law each x_i was drawn from.
        p: (B, w + 1, V) the verifier's distributions p_1..p_{w+1}, processed by ``sampling``.
    """
    rows, w = proposal.shape
    if not w:
        return Judgement(proposal.new_zeros(rows), sampling.choose(p[:, 0], generator), proposal.float())
    if sampling.greedy:
        accept = proposal == p[:, :w].argmax(-1)  # (B, w)
        acceptance_probs = accept.float()
    else:
        p_x = p[:, :w].gather(-1, proposal[..., None])[..., 0]  # (B, w)
        q_x = q.gather(-1, proposal[..., None])[..., 0]  # > 0 where x was drawn from q
        acceptance_probs = (p_x / q_x.clamp_min(1e-30)).clamp(max=1.0)
        u = torch.rand(p_x.shape, generator=generator, device=p_x.device)
        accept = u * q_x < p_x
    m = None
    if any(count != w for count in proposed):  # a row's padding is never accepted
        m = torch.tensor(proposed, device=proposal.device)
        accept = accept & (torch.arange(w, device=proposal.device)[None, :] < m[:, None])
    accepted = accept.long().cumprod(1).sum(1)  # (B,) the leading run of acceptances
    rows_index = torch.arange(rows, device=proposal.device)
    p_next = p[rows_index, accepted]  # (B, V) p_{a+1}
    if not sampling.greedy:  # a rejection at a <= m - 1 draws from the residual there; else the bonus
        limit = w if m is None else m
        rejected = accepted < limit
        q_next = q[rows_index, accepted.clamp(max=w - 1)]
        p_next = torch.where(rejected[:, None], residual(p_next, q_next), p_next)
    return Judgement(accepted, sampling.choose(p_next, generator), acceptance_probs)


def read_outcomes(
    judgement: Judgement, proposal: torch.Tensor, proposed: list[int]
) -> list[tuple[int, int, list[int], list[float]]]:
    """Every row's (accepted, next token, proposed tokens, acceptance probabilities) in one host
    read, packed in float32 (exact for token ids below 2**24; MPS has no float64)."""
    rows, w = proposal.shape
    packed = torch.cat(
        [
            judgement.accepted[:, None].float(),
            judgement.next_token[:, None].float(),
            proposal.float(),
            judgement.acceptance_probs.float(),
        ],
        1,
    )  # (B, 2 + 2w)
    values = packed.tolist()
    outcomes = []
    for row, m in zip(values, proposed, strict=True):
        outcomes.append((int(row[0]), int(row[1]), [int(x) for x in row[2 : 2 + m]], row[2 + w : 2 + w + m]))
    return outcomes
