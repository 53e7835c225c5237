"""Teacher-forced analysis of a decoded segment: the fields of a trace (see :mod:`specrl.traces.format`).

Engine-level code (the models and the engine's sampling, caches and generation); the episode
that produces a segment is recorded by :mod:`specrl.envs.recording`.
"""

from __future__ import annotations

import torch

from specrl.engine.cache import CachedModel
from specrl.engine.generation import Generation
from specrl.engine.sampling import SamplingConfig, entropy
from specrl.engine.types import Action
from specrl.models import ModelPair


def analyse_segment(
    pair: ModelPair,
    sampling: SamplingConfig,
    prompt_ids: list[int],
    trajectory: list[int],
    k_max: int,
    generator: torch.Generator,
) -> dict[str, list]:
    """Teacher-forced statistics of ``trajectory`` after ``prompt_ids``: the position fields
    of a segment, as :mod:`specrl.traces.format` describes them.

    Both models run once over the whole sequence; then, for every position where a rejection
    can happen, the draft continues from its rejected proposal and the target verifies that
    continuation. The caches are cut back between positions, never recomputed.
    """
    length, n = len(prompt_ids), len(trajectory)
    sequence = prompt_ids + trajectory
    ids = torch.tensor([sequence], dtype=torch.long, device=pair.device)
    target, draft = CachedModel(pair.target, pair.vocab_size), CachedModel(pair.draft, pair.vocab_size)
    p = sampling.probs(target.feed(ids[:, : length + n - 1], keep=n))[0]  # (n, V): p[j] predicts y_j
    q = sampling.probs(draft.feed(ids[:, : length + n - 1], keep=n))[0]  # (n, V)
    y = ids[0, length:]
    confidence, entropies = q.max(-1).values, entropy(q)
    if sampling.greedy:
        accept_prob = (q.argmax(-1) == y).float()
        accepted_ap = torch.ones(n)
    else:
        p_y, q_y = p.gather(-1, y[:, None])[:, 0], q.gather(-1, y[:, None])[:, 0]
        accept_prob = (q_y / p_y).clamp(max=1.0)
        accepted_ap = torch.where(q_y > 0, (p_y / q_y.clamp_min(1e-30)).clamp(max=1.0), torch.ones_like(q_y))
    off_confidence, off_entropy, off_ap = (torch.zeros(n, k_max) for _ in range(3))
    off_confidence[:, 0], off_entropy[:, 0] = confidence, entropies
    rejectable = (accept_prob < 1.0).nonzero()[:, 0].tolist()
    # Both caches hold the true sequence up to ``valid`` tokens (then earlier continuations).
    draft_valid = target_valid = length + n - 1
    for j in rejectable:
        # The rejected proposal at j: its law given rejection.
        if sampling.greedy:
            x = [int(q[j].argmax())]
            off_ap[j, 0] = float(x[0] == int(p[j].argmax()))
        else:
            x = [int(torch.multinomial((q[j] - p[j]).clamp(min=0), 1, generator=generator))]
            off_ap[j, 0] = min(1.0, float(p[j, x[0]] / q[j, x[0]]))
        room = pair.context_length - (length + j) - 1  # the engine never drafts past the window
        steps = max(0, min(k_max - 1, room))
        if not steps:
            continue
        draft.rollback(min(draft_valid, length + j))
        draft_valid = length + j
        pending = ids[:, draft.length : length + j]
        q_off = []
        for _ in range(steps):
            step_input = torch.cat([pending, torch.tensor([[x[-1]]], device=ids.device)], 1)
            q_off.append(sampling.probs(draft.feed(step_input)[0, -1]))
            x.append(int(sampling.choose(q_off[-1][None], generator)[0]))
            pending = ids[:, :0]
        target.rollback(min(target_valid, length + j))
        target_valid = length + j
        verify_input = torch.cat(
            [ids[:, target.length : length + j], torch.tensor([x[:steps]], device=ids.device)], 1
        )
        p_off = sampling.probs(target.feed(verify_input, keep=steps))[0]  # (steps, V)
        for i in range(1, steps + 1):
            q_i, p_i, x_i = q_off[i - 1], p_off[i - 1], x[i]
            off_confidence[j, i] = q_i.max()
            off_entropy[j, i] = entropy(q_i)
            if sampling.greedy:
                off_ap[j, i] = float(x_i == int(p_i.argmax()))
            else:
                off_ap[j, i] = min(1.0, float(p_i[x_i] / q_i[x_i]))
    return {
        "tokens": trajectory,
        "confidence": confidence.tolist(),
        "entropy": entropies.tolist(),
        "accept_prob": accept_prob.tolist(),
        "accepted_ap": accepted_ap.tolist(),
        "off_confidence": off_confidence.tolist(),
        "off_entropy": off_entropy.tolist(),
        "off_ap": off_ap.tolist(),
    }


def extend_past_eos(
    pair: ModelPair, sampling: SamplingConfig, context: list[int], k_max: int, seed: int
) -> list[int]:
    """k_max more target tokens after an EOS (the engine may draft past an EOS it has not seen)."""
    room = pair.context_length - len(context)
    if room <= 0:
        return []
    generation = Generation(pair, context, min(k_max, room), sampling, seed, stop_at_eos=False)
    while not generation.done:
        generation.step(Action(0))
    return generation.output_ids
