"""Timed steps of the real loop, what the loop-learned model is fitted to (:func:`record_loop`):
the engine's own steps on the pair's train prompts, greedy and sampled interleaved, every k and a
few tau cuts, each step's device-synchronised draft and verify seconds. It prices what the
simulator replaces, including what isolated forwards miss (cache effects between the models,
sampling, the engine's per-step work).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np
import torch

from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action, StepResult
from specrl.models import ModelPair

LOOP_INCLUDED = (
    "StepResult.draft_seconds and verify_seconds of Generation.step: every draft forward with its "
    "sampling, the verify forward, acceptance, the emitted token's draw and cache rollback"
)


@dataclasses.dataclass(frozen=True)
class StepRecords:
    """Timed steps of the real loop, one entry per step (equal-length arrays): whether it was
    ``sampled``, :class:`StepResult`'s ``context`` (length), ``draft_forwards``, ``proposed``,
    ``k``, measured ``draft_seconds`` and ``verify_seconds``, and its ``episode`` (the held-out
    split is by episode)."""

    sampled: np.ndarray
    context: np.ndarray
    draft_forwards: np.ndarray
    proposed: np.ndarray
    k: np.ndarray
    draft_seconds: np.ndarray
    verify_seconds: np.ndarray
    episode: np.ndarray

    @classmethod
    def from_steps(cls, steps: Sequence[tuple[StepResult, bool, int]]) -> StepRecords:
        """From (step result, sampled, episode) triples."""
        columns = {
            "sampled": [s for _, s, _ in steps],
            "context": [r.context_length for r, _, _ in steps],
            "draft_forwards": [r.draft_forwards for r, _, _ in steps],
            "proposed": [r.proposed for r, _, _ in steps],
            "k": [r.k for r, _, _ in steps],
            "draft_seconds": [r.draft_seconds for r, _, _ in steps],
            "verify_seconds": [r.verify_seconds for r, _, _ in steps],
            "episode": [e for _, _, e in steps],
        }
        return cls.from_dict(columns)

    @classmethod
    def from_dict(cls, columns: Mapping[str, Sequence]) -> StepRecords:
        """From a mapping of the field names to sequences (what :meth:`to_dict` writes)."""
        kinds = {"sampled": bool, "draft_seconds": np.float64, "verify_seconds": np.float64}
        arrays = {
            f.name: np.asarray(columns[f.name], dtype=kinds.get(f.name, np.int64))
            for f in dataclasses.fields(cls)
        }
        if len({len(a) for a in arrays.values()}) != 1:
            raise ValueError("StepRecords: every field must have one entry per step")
        return cls(**arrays)

    def to_dict(self) -> dict[str, list]:
        return {f.name: getattr(self, f.name).tolist() for f in dataclasses.fields(self)}

    def __len__(self) -> int:
        return len(self.context)

    def select(self, mask: np.ndarray) -> StepRecords:
        """The steps where ``mask`` is True."""
        return StepRecords(**{f.name: getattr(self, f.name)[mask] for f in dataclasses.fields(self)})


def calibration_actions(k_max: int, taus: Sequence[float] = (0.3, 0.6)) -> list[Action]:
    """One cycle of the recording's actions: every k = 0..k_max at tau 0 (so every verify size
    n = k + 1 occurs as often), and every second k once more with a tau cut cycling over
    ``taus`` (so tau-stopped drafts, a forward more than proposals, occur too; not more often,
    since most of them stop early and verify one or two tokens)."""
    actions = [Action(k, 0.0) for k in range(k_max + 1)]
    if taus:
        actions += [Action(k, taus[i % len(taus)]) for i, k in enumerate(range(2, k_max + 1, 2))]
    return actions


def calibration_prompts(pair: ModelPair, rng: np.random.Generator, room: int) -> list[list[int]]:
    """Token ids of the pair's train prompts, domains alternating, each domain shuffled; random
    token ids (16-128 long) for a pair without prompts. Each leaves ``room`` tokens to decode."""
    longest = max(1, pair.context_length - room)
    texts = pair.prompts.get("train", {})
    if not texts:
        top = pair.vocab_size - 1 if pair.eos_token_id == pair.vocab_size - 1 else pair.vocab_size
        return [rng.integers(0, top, int(rng.integers(16, 129))).tolist()[:longest] for _ in range(64)]
    orders = {domain: rng.permutation(len(items)).tolist() for domain, items in texts.items() if items}
    prompts = []
    for i in range(max(len(order) for order in orders.values())):
        for domain, order in orders.items():
            ids = pair.encode(texts[domain][order[i % len(order)]])[-longest:]
            if ids:
                prompts.append(ids)
    return prompts


@torch.inference_mode()
def loop_steps(
    pair: ModelPair,
    lanes: Sequence[tuple[SamplingConfig, Callable[[], Action]]],
    steps: int,
    warmup_steps: int,
    max_new_tokens: int,
    seed: int,
    progress: bool,
) -> list[tuple[int, int, StepResult]]:
    """Step one live generation per lane in turn, ``warmup_steps + steps`` steps in all, so that
    every lane meets the same machine noise. A lane is (its sampling, its next action); each lane
    goes through the pair's train prompts (:func:`calibration_prompts`) in the same order, a new
    generation when its last one finished. Returns (lane, episode, result) of each step after the
    warm-up (an episode numbers a generation, unique over the lanes)."""
    from tqdm import tqdm

    from specrl.engine.generation import Generation  # engine -> latency is one way: import late

    prompts = calibration_prompts(pair, np.random.default_rng(seed), room=max_new_tokens)
    live: list[Generation | None] = [None] * len(lanes)
    started, episodes = [0] * len(lanes), [0] * len(lanes)
    recorded = []
    bar = tqdm(range(warmup_steps + steps), desc=f"timing {pair.name}", unit="step", disable=not progress)
    for done in bar:
        lane = done % len(lanes)
        sampling, next_action = lanes[lane]
        generation = live[lane]
        if generation is None or generation.done:
            prompt, count = prompts[started[lane] % len(prompts)], started[lane]
            generation = live[lane] = Generation(pair, [prompt], max_new_tokens, sampling, seed=seed + count)
            episodes[lane], started[lane] = count * len(lanes) + lane, count + 1
        result = generation.step(next_action()).merged()
        if done >= warmup_steps:
            recorded.append((lane, episodes[lane], result))
    return recorded


def record_loop(
    pair: ModelPair,
    *,
    k_max: int = 8,
    steps: int = 3000,
    warmup_steps: int = 100,
    temperature: float = 1.0,
    max_new_tokens: int = 192,
    seed: int = 0,
    progress: bool = True,
) -> StepRecords:
    """Time ``steps`` steps of the engine's loop (:func:`loop_steps`), greedy and at
    ``temperature`` interleaved; each mode's steps go through shuffled cycles of
    :func:`calibration_actions`."""
    if k_max < 1 or steps < 1 or warmup_steps < 0:
        raise ValueError(
            f"k_max and steps must be >= 1 and warmup_steps >= 0, got {k_max}, {steps}, {warmup_steps}"
        )
    rng = np.random.default_rng(seed + 1)
    cycle = calibration_actions(k_max)
    cycles: list[list[Action]] = [[], []]

    def next_action(mode: int) -> Action:
        if not cycles[mode]:
            cycles[mode] = [cycle[i] for i in rng.permutation(len(cycle))]
        return cycles[mode].pop()

    modes = enumerate((SamplingConfig(), SamplingConfig(temperature)))
    lanes = [(sampling, lambda mode=mode: next_action(mode)) for mode, sampling in modes]
    recorded = loop_steps(pair, lanes, steps, warmup_steps, max_new_tokens, seed, progress)
    return StepRecords.from_steps([(result, bool(lane), episode) for lane, episode, result in recorded])
