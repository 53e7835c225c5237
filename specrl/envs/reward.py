"""The reward of one speculative step, and what the step reports in ``info``. The ONE place each
is built (docs/design.md section 3 says why)::

    r_t = (n_t - rho * dt_t) / scale

n_t: tokens the step emitted; dt_t: its seconds (draft + verify, wall-clock or modeled; in the
batch simulator plus the prefill of the requests admitted after it, which stalls the rows);
rho: the scenario's reference throughput (tokens/s); scale: a positive constant. With rho plain
decoding's throughput, a plain step earns about 0. A single sequence's prefill is not counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from specrl.engine.types import throughput

if TYPE_CHECKING:
    from specrl.engine.types import Action, StepResult


def step_reward(tokens: int, seconds: float, reference_tokens_per_s: float, scale: float = 1.0) -> float:
    """(tokens - reference_tokens_per_s * seconds) / scale."""
    return (tokens - reference_tokens_per_s * seconds) / scale


def step_info(
    result: StepResult,
    action: Action,
    domain: str,
    segment: int,
    episode_tokens: int,
    episode_seconds: float,
    seconds: float | None = None,
    drafts: int | None = None,
) -> dict[str, Any]:
    """The ``info`` of an env's step (the real loop's and the replay's alike; a batch's rows as one
    step, :func:`~specrl.engine.types.merge_rows`): the step's tokens, seconds (the reward's:
    ``seconds``, default the result's draft and verify) and throughput, its counts (``drafts``:
    the rows that drafted, vLLM's ``num_drafts``; default 1 if the step drafted), the action asked
    for and the k used, where the episode is (the first row's), and the :class:`StepResult` itself."""
    seconds = result.seconds if seconds is None else seconds
    return {
        "tokens": result.emitted,
        "seconds": seconds,
        "tokens_per_s": throughput(result.emitted, seconds),
        "proposed": result.proposed,
        "accepted": result.accepted,
        "drafts": int(result.proposed > 0) if drafts is None else drafts,
        "k": action.k,
        "k_used": result.k,
        "tau": action.tau,
        "domain": domain,
        "segment": segment,
        "episode_tokens": episode_tokens,
        "episode_seconds": episode_seconds,
        "step_result": result,
    }
