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
class Verdict:
    """The outcome of verifying m proposed tokens.

    Attributes:
        accepted: a, the leading run of accepted proposals (row 0).
        next_token: (B,) the token after them: the correction drawn from the residual at the
            first rejection, or the bonus from p_{m+1} (greedy: the argmax of p_{a+1}).
        acceptance_probs: (B, m) min(1, p_i(x_i) / q_i(x_i)); greedy: 1 where x_i = argmax p_i.
    """

    accepted: int
    next_token: torch.Tensor
    acceptance_probs: torch.Tensor


def verify(
    proposal: torch.Tensor,
    q: torch.Tensor,
    p: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
) -> Verdict:
    """Accept x_i while u_i < p_i(x_i) / q_i(x_i); then a correction or bonus token.

    Args:
        proposal: (B, m) the proposed tokens x_1..x_m.
        q: (B, m, V) the law each x_i was drawn from.
        p: (B, m + 1, V) the verifier's distributions p_1..p_{m+1}, processed by ``sampling``.
    """
    m = proposal.shape[1]
    if m:
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
    return Verdict(accepted, sampling.choose(next_probs, generator), acceptance_probs)
