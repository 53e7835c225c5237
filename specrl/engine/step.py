"""One speculative iteration over the rows: draft, verify, accept losslessly, roll back (q the
drafter's law, p the target's, x_1..x_m the proposals; a single sequence is a batch of one).
"""

from __future__ import annotations

import torch

from specrl.engine.cache import KVCache
from specrl.engine.drafters.base import Drafter
from specrl.engine.rejection import judge, read_outcomes
from specrl.engine.sampling import SamplingConfig
from specrl.engine.timing import DeviceClock
from specrl.engine.types import Action, Outcome, Step, StepResult


def speculative_step(
    sequences: list[list[int]],
    ks: list[int],
    target: KVCache,
    drafter: Drafter,
    action: Action,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    clock: DeviceClock,
    eos_token_id: int | None = None,
    keep_target_logits: bool = False,
) -> Step:
    """Run one iteration on every row's sequence and return what happened, row by row.

    Invariant on entry and exit: the target's cache holds every token of a row but the last; the
    drafter's state covers a prefix of each row (it catches up on its next proposal). ``ks[r]``
    is ``action.k`` clipped by the caller to row r's room. A row's emitted tokens end at
    ``eos_token_id``. ``keep_target_logits`` returns the verify forward's logits at the emitted
    positions too (online draft adaptation learns from them: no second target forward).
    """
    lengths = [len(sequence) for sequence in sequences]
    start = clock.now()

    # 1. Draft up to k tokens per row, each x_i ~ q_i, stopping before a token whose confidence
    #    max q is below tau or that the action's per-token stop rule rejects.
    proposal = drafter.propose(sequences, ks, action, sampling, generator)
    drafted_at = clock.now()

    # 2. Verify: one target forward over each row's last token plus x_1..x_m -> p_1..p_{m+1}.
    target_logits = target.verify(
        [sequence[-1:] for sequence in sequences], proposal.tokens, proposal.proposed
    )
    p = sampling.probs(target_logits)  # (B, w + 1, V)

    # 3. Accept x_i while u_i < p_i(x_i) / q_i(x_i); then a correction or bonus token.
    judgement = judge(proposal.tokens, proposal.proposed, proposal.q, p, sampling, generator)
    outcomes = read_outcomes(judgement, proposal.tokens, proposal.proposed)  # the step's one read

    # 4. Roll back: the target and the drafter cut to each row's accepted prefix (the new token
    #    is not fed yet); an EOS ends a row's tokens.
    results = []
    for r, (accepted, next_token, drafted, acceptance_probs) in enumerate(outcomes):
        emitted = drafted[:accepted] + [next_token]
        if eos_token_id is not None and eos_token_id in emitted:
            emitted = emitted[: emitted.index(eos_token_id) + 1]
        outcome = Outcome(
            ks[r],
            proposal.proposed[r],
            accepted,
            len(emitted),
            proposal.confidences[r],
            proposal.entropies[r],
            acceptance_probs,
            proposal.stopped[r],
        )
        logits = target_logits[r, : len(emitted)].clone() if keep_target_logits else None
        results.append(StepResult.assemble(action, outcome, 0.0, 0.0, lengths[r], emitted, logits))
    kept = [length + result.emitted - 1 for length, result in zip(lengths, results, strict=True)]
    target.rollback(kept)
    drafter.rollback(kept)
    verified_at = clock.now()

    for result in results:
        result.draft_seconds, result.verify_seconds = drafted_at - start, verified_at - drafted_at
    return Step(action, [], results, drafted_at - start, verified_at - drafted_at)
