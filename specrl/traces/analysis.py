"""Teacher-forced analysis of a decoded segment: the fields of a trace (see :mod:`specrl.traces.format`).

Engine-level code (the models and the engine's sampling, caches and generation); the episode
that produces a segment is recorded by :mod:`specrl.envs.recording`.
"""

from __future__ import annotations

from typing import Any

import torch

from specrl.engine.cache import KVCache
from specrl.engine.drafters.ngram import NGramIndex
from specrl.engine.drafters.registry import DrafterPool
from specrl.engine.generation import Generation
from specrl.engine.sampling import SamplingConfig, entropy
from specrl.engine.types import DEFAULT_DRAFTER, Action
from specrl.models import ModelPair
from specrl.traces.format import LOOKUP_DRAFTER, analysed_drafters


class _Verifier:
    """The target over the true sequence, teacher-forced once; then cut back and fed a wrong
    continuation wherever one must be verified, catching up on the true tokens in between."""

    def __init__(
        self, pair: ModelPair, sampling: SamplingConfig, ids: torch.Tensor, length: int, n: int
    ) -> None:
        self.model, self.sampling, self.ids = KVCache(pair.target, pair.vocab_size), sampling, ids
        self.p = sampling.probs(self.model.feed(ids[:, : length + n - 1], keep=n))[0]  # p[j] predicts y_j
        self.valid = length + n - 1  # the cache holds the true sequence up to here

    def after(self, prefix: int, tokens: list[int]) -> torch.Tensor:
        """(len(tokens), V): the target's laws after each of ``tokens``, fed after the true prefix."""
        self.model.rollback([min(self.valid, prefix)])
        self.valid = prefix
        step = torch.cat(
            [self.ids[:, self.model.length : prefix], torch.tensor([tokens], device=self.ids.device)], 1
        )
        return self.sampling.probs(self.model.feed(step, keep=len(tokens)))[0]


def analyse_segment(
    pair: ModelPair,
    sampling: SamplingConfig,
    prompt_ids: list[int],
    trajectory: list[int],
    k_max: int,
    generator: torch.Generator,
    drafters: tuple[str, ...] = (DEFAULT_DRAFTER,),
) -> dict[str, Any]:
    """Teacher-forced statistics of ``trajectory`` after ``prompt_ids``: the position fields
    of a segment, as :mod:`specrl.traces.format` describes them: the draft's at the top level,
    and under ``"drafters"`` those of every other drafter in ``drafters`` that has its own
    (:func:`~specrl.traces.format.analysed_drafters`).

    The target runs once over the whole sequence; it is cut back and fed each wrong
    continuation that must be verified, never recomputed.
    """
    length, n = len(prompt_ids), len(trajectory)
    ids = torch.tensor([prompt_ids + trajectory], dtype=torch.long, device=pair.device)
    verifier = _Verifier(pair, sampling, ids, length, n)
    pool = DrafterPool(pair)
    fields: dict[str, Any] = {
        "tokens": trajectory,
        **_model_fields(pool.model(DEFAULT_DRAFTER), pair, sampling, verifier, length, n, k_max, generator),
    }
    others = {}
    for name in analysed_drafters(drafters):
        if name == DEFAULT_DRAFTER:
            continue
        if name == LOOKUP_DRAFTER:
            others[name] = _lookup_fields(pair, sampling, verifier, length, n, k_max)
        else:
            others[name] = _model_fields(
                pool.model(name), pair, sampling, verifier, length, n, k_max, generator
            )
    if others:
        fields["drafters"] = others
    return fields


def _model_fields(
    model: Any,
    pair: ModelPair,
    sampling: SamplingConfig,
    verifier: _Verifier,
    length: int,
    n: int,
    k_max: int,
    generator: torch.Generator,
) -> dict[str, list]:
    """The position fields of a model drafter: it runs once over the whole sequence; then, for
    every position where a rejection can happen, it continues from its rejected proposal and
    the target verifies that continuation. Its cache is cut back between positions."""
    ids, p = verifier.ids, verifier.p
    draft = KVCache(model, pair.vocab_size)
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
    draft_valid = length + n - 1  # the draft's cache holds the true sequence up to here
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
        draft.rollback([min(draft_valid, length + j)])
        draft_valid = length + j
        pending = ids[:, draft.length : length + j]
        q_off = []
        for _ in range(steps):
            step_input = torch.cat([pending, torch.tensor([[x[-1]]], device=ids.device)], 1)
            q_off.append(sampling.probs(draft.feed(step_input)[0, -1]))
            x.append(int(sampling.choose(q_off[-1][None], generator)[0]))
            pending = ids[:, :0]
        p_off = verifier.after(length + j, x[:steps])  # (steps, V)
        for i in range(1, steps + 1):
            q_i, p_i, x_i = q_off[i - 1], p_off[i - 1], x[i]
            off_confidence[j, i] = q_i.max()
            off_entropy[j, i] = entropy(q_i)
            if sampling.greedy:
                off_ap[j, i] = float(x_i == int(p_i.argmax()))
            else:
                off_ap[j, i] = min(1.0, float(p_i[x_i] / q_i[x_i]))
    return {
        "confidence": confidence.tolist(),
        "entropy": entropies.tolist(),
        "accept_prob": accept_prob.tolist(),
        "accepted_ap": accepted_ap.tolist(),
        "off_confidence": off_confidence.tolist(),
        "off_entropy": off_entropy.tolist(),
        "off_ap": off_ap.tolist(),
    }


def _lookup_fields(
    pair: ModelPair, sampling: SamplingConfig, verifier: _Verifier, length: int, n: int, k_max: int
) -> dict[str, list]:
    """The n-gram lookup's fields (:data:`~specrl.traces.format.LOOKUP_FIELDS`): per position, the
    tokens a lookup there could propose, the order of its match, how many of them lead the
    trajectory, and the engine's acceptance_probs entry of each; past the first mismatch the target
    verifies the lookup."""
    ids, p = verifier.ids, verifier.p
    sequence, y = ids[0], ids[0, length:].tolist()
    lookup = NGramIndex()
    available, order, match, ap = [], [], [], torch.zeros(n, k_max)
    for j in range(n):
        room = pair.context_length - (length + j) - 1  # the engine never drafts past the window
        context = sequence[: length + j]
        found_match = lookup.longest_match(context)  # one search gives the fields
        start = None if found_match is None else found_match[1]
        available.append(0 if start is None else len(context) - start)
        order.append(0 if found_match is None else found_match[0])
        found = [] if start is None else context[start : start + max(0, min(k_max, room, n - j))].tolist()
        m = next((i for i, x in enumerate(found) if x != y[j + i]), len(found))
        match.append(m)
        for i, x in enumerate(found[: m + 1]):  # on the trajectory: the teacher-forced p
            ap[j, i] = float(x == int(p[j + i].argmax())) if sampling.greedy else float(p[j + i, x])
        if m + 1 < len(found):  # past the first mismatch: the target on the lookup's own text
            p_off = verifier.after(length + j + m, found[m:-1])
            for i, x in enumerate(found[m + 1 :], start=m + 1):
                ap[j, i] = (
                    float(x == int(p_off[i - m - 1].argmax()))
                    if sampling.greedy
                    else float(p_off[i - m - 1, x])
                )
    return {"available": available, "order": order, "match": match, "ap": ap.tolist()}


def extend_past_eos(
    pair: ModelPair, sampling: SamplingConfig, context: list[int], k_max: int, seed: int
) -> list[int]:
    """k_max more target tokens after an EOS (the engine may draft past an EOS it has not seen)."""
    room = pair.context_length - len(context)
    if room <= 0:
        return []
    generation = Generation(pair, [context], min(k_max, room), sampling, seed, stop_at_eos=False)
    while not generation.done:
        generation.step(Action(0))
    return generation.output_ids(0)
