"""The reward of one speculative step. The ONE place the formula lives (docs/design.md section 3).

    r_t = (n_t - rho * dt_t) / scale

n_t: tokens the step emitted; dt_t: its seconds (draft + verify, wall-clock or modeled);
rho: the scenario's reference throughput (tokens/s); scale: a positive constant.

The episode return is (N - rho * T) / scale, with N tokens in T seconds. The output law does
not depend on the policy (the engine is lossless), so E[N] is the same for every policy and
maximising the return minimises E[T], i.e. maximises throughput N / T; for a fixed N (greedy
decoding of a given prompt) the return is strictly increasing in N / T. Raw per-step
tokens/sec (n_t / dt_t) is not used: its sum grows with the number of steps and prefers many
slow one-token steps to few fast multi-token ones.

Reading the value: with rho the throughput of plain decoding, a plain step earns about 0 and
the return is the number of tokens gained over plain decoding in the same time (/ scale).
Prefill time is not counted: it does not depend on the policy.
"""

from __future__ import annotations


def step_reward(tokens: int, seconds: float, reference_tokens_per_s: float, scale: float = 1.0) -> float:
    """(tokens - reference_tokens_per_s * seconds) / scale."""
    return (tokens - reference_tokens_per_s * seconds) / scale
