"""Decoding history -> the observation vector. The ONE place features are defined.

The Gymnasium envs and the online :class:`~specrl.engine.SpeculativeDecoder` both build a
:class:`FeatureTracker`, feed it every :class:`StepResult` and hand ``vector()`` to the
controller, so a policy sees exactly the inputs it was trained on. Features use only step
results and the static settings of the generation (never model internals), so any source of
step results (the real loop, a trace replay) produces them.

Every feature lies in [0, 1]. Windows count *steps*, not tokens. "Proposing step" means a
step that proposed at least one draft token; statistics over proposing steps keep their last
value through runs of plain (k = 0) steps, and ``steps_since_draft`` says how stale they are.

====  ======================  =============================================================
 idx  name                    definition (range [0, 1]; value before any data)
====  ======================  =============================================================
  0   acceptance_short        accepted / proposed over the last 4 proposing steps (0)
  1   acceptance_long         accepted / proposed over the last 32 proposing steps (0)
  2   acceptance_prob_short   mean min(1, p/q) of proposed tokens, last 4 proposing steps:
                              the expected acceptance, less noisy than the outcomes (greedy:
                              the share of draft tokens equal to the target's argmax) (0)
  3   last_proposed           proposed tokens m of the last step / 16, clipped (0)
  4   last_accepted           accepted tokens a of the last step / 16, clipped (0)
  5   last_k                  k the controller asked for in the last step / 16, clipped (0)
  6   last_tau                tau of the last step (0)
  7   last_stopped_by_tau     1 if drafting in the last step ended on the tau cut, else 0 (0)
  8   confidence_mean         mean draft confidence max_v q(v) over the positions drafted in
                              the last step that ran the draft (0)
  9   confidence_min          smallest of those confidences (0)
 10   entropy_mean            mean draft entropy at those positions / ln(vocab size) (0)
 11   rejected_confidence     mean confidence of the first rejected draft token over the
                              last 8 steps that had a rejection (0)
 12   accepted_confidence     mean confidence of accepted draft tokens over the last 8
                              proposing steps that accepted any (0)
 13   cost_ratio              measured seconds per draft forward / seconds per verification,
                              over the last 16 steps, clipped to 1 (0 until both are seen)
 14   steps_since_draft       steps since the draft last ran / 16, clipped (1)
 15   context_fraction        sequence length (prompt + generated) / context window
 16   progress                tokens generated / max_new_tokens
 17   temperature             sampling temperature / 2, clipped (0 = greedy)
 18   batch_size              log2(batch size) / 8, clipped (0 for batch 1, 1 for 256)
====  ======================  =============================================================

Changing a definition, the order, or a constant below changes ``FEATURE_VERSION``; an
exported policy records the version it was trained with and refuses another.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from specrl.engine.types import StepResult

if TYPE_CHECKING:
    from specrl.engine.generation import Generation

FEATURE_VERSION = 1

FEATURE_NAMES: tuple[str, ...] = (
    "acceptance_short",
    "acceptance_long",
    "acceptance_prob_short",
    "last_proposed",
    "last_accepted",
    "last_k",
    "last_tau",
    "last_stopped_by_tau",
    "confidence_mean",
    "confidence_min",
    "entropy_mean",
    "rejected_confidence",
    "accepted_confidence",
    "cost_ratio",
    "steps_since_draft",
    "context_fraction",
    "progress",
    "temperature",
    "batch_size",
)
N_FEATURES = len(FEATURE_NAMES)
FEATURE_LOW = 0.0  # every feature lies in [FEATURE_LOW, FEATURE_HIGH]
FEATURE_HIGH = 1.0

SHORT_WINDOW = 4  # proposing steps
LONG_WINDOW = 32  # proposing steps
CONFIDENCE_WINDOW = 8  # steps with a rejection / with acceptances
COST_WINDOW = 16  # steps
K_NORM = 16  # token counts and k are divided by this (larger values clip to 1)
TEMPERATURE_NORM = 2.0
BATCH_LOG2_NORM = 8.0


@dataclass(frozen=True)
class GenerationSettings:
    """The static facts of a generation that features are normalised by.

    Attributes:
        max_new_tokens: the token budget of the whole episode / generation.
        context_window: the models' context length (tokens).
        vocab_size: the shared vocabulary (entropy is divided by its log).
        temperature: sampling temperature (0 = greedy).
        batch_size: sequences decoded together.
    """

    max_new_tokens: int
    context_window: int
    vocab_size: int
    temperature: float = 0.0
    batch_size: int = 1

    @classmethod
    def of(cls, generation: Generation, max_new_tokens: int | None = None) -> GenerationSettings:
        """Settings of an engine generation; ``max_new_tokens`` overrides its own budget."""
        return cls(
            max_new_tokens=max_new_tokens or generation.max_new_tokens,
            context_window=generation.pair.context_length,
            vocab_size=generation.pair.vocab_size,
            temperature=generation.sampling.temperature,
            batch_size=generation.tokens.shape[0],
        )


def _clip01(value: float) -> float:
    return min(1.0, max(0.0, value))


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _rate(pairs: list[tuple[float, float]]) -> float:
    """sum(numerators) / sum(denominators), 0 when the denominator is 0."""
    denominator = sum(d for _, d in pairs)
    return sum(n for n, _ in pairs) / denominator if denominator > 0 else 0.0


class FeatureTracker:
    """Running statistics of one generation (or episode), turned into the feature vector.

    Usage::

        tracker = FeatureTracker(GenerationSettings.of(generation), generation.prompt_length)
        while not generation.done:
            result = generation.step(controller.act(tracker.vector()))
            tracker.update(result)
            controller.observe(result)
    """

    def __init__(self, settings: GenerationSettings, prompt_length: int) -> None:
        self.reset(settings, prompt_length)

    def reset(self, settings: GenerationSettings, prompt_length: int) -> None:
        """Forget all history: a new generation of ``prompt_length`` prompt tokens starts."""
        self.settings = settings
        self.context_length = prompt_length
        self.generated = 0
        self.last: StepResult | None = None
        self.last_draft: StepResult | None = None  # the last step that ran the draft
        self.steps_since_draft: int | None = None
        # per proposing step: (accepted, proposed, sum of acceptance probabilities)
        self.proposing: deque[tuple[int, int, float]] = deque(maxlen=LONG_WINDOW)
        self.rejected_confidences: deque[float] = deque(maxlen=CONFIDENCE_WINDOW)
        # per step with acceptances: (sum of accepted confidences, accepted count)
        self.accepted_confidences: deque[tuple[float, int]] = deque(maxlen=CONFIDENCE_WINDOW)
        # per step: (draft seconds, draft forwards, verify seconds)
        self.timings: deque[tuple[float, int, float]] = deque(maxlen=COST_WINDOW)

    def set_context_length(self, length: int) -> None:
        """The sequence changed outside a step (an env appended text); record its new length."""
        self.context_length = length

    def update(self, result: StepResult) -> None:
        """Account for one step."""
        self.last = result
        self.generated += result.emitted
        self.context_length = result.context_length + result.emitted
        draft_forwards = result.draft_forwards
        if draft_forwards:
            self.last_draft = result
            self.steps_since_draft = 0
        elif self.steps_since_draft is not None:
            self.steps_since_draft += 1
        if result.proposed:
            self.proposing.append((result.accepted, result.proposed, sum(result.acceptance_probs)))
        if result.accepted < result.proposed:
            self.rejected_confidences.append(result.confidences[result.accepted])
        if result.accepted:
            self.accepted_confidences.append((sum(result.confidences[: result.accepted]), result.accepted))
        self.timings.append((result.draft_seconds, draft_forwards, result.verify_seconds))

    def _cost_ratio(self) -> float:
        draft_seconds = sum(seconds for seconds, forwards, _ in self.timings if forwards)
        draft_forwards = sum(forwards for _, forwards, _ in self.timings)
        verify_seconds = sum(seconds for _, _, seconds in self.timings)
        if not draft_forwards or verify_seconds <= 0:
            return 0.0
        per_verify = verify_seconds / len(self.timings)
        return _clip01(draft_seconds / draft_forwards / per_verify)

    def vector(self) -> np.ndarray:
        """The observation now: float32 array of shape (N_FEATURES,), every entry in [0, 1]."""
        settings, last, drafted = self.settings, self.last, self.last_draft
        short = [(a, m) for a, m, _ in list(self.proposing)[-SHORT_WINDOW:]]
        short_probs = [(p, m) for _, m, p in list(self.proposing)[-SHORT_WINDOW:]]
        confidences = drafted.confidences if drafted is not None else []
        entropies = drafted.entropies if drafted is not None else []
        features = [
            _rate(short),
            _rate([(a, m) for a, m, _ in self.proposing]),
            _rate(short_probs),
            last.proposed / K_NORM if last else 0.0,
            last.accepted / K_NORM if last else 0.0,
            last.action.k / K_NORM if last else 0.0,
            last.action.tau if last else 0.0,
            float(last.stopped_by_tau) if last else 0.0,
            _mean(confidences),
            min(confidences) if confidences else 0.0,
            _mean(entropies) / math.log(max(2, settings.vocab_size)),
            _mean(self.rejected_confidences),
            _rate(list(self.accepted_confidences)),
            self._cost_ratio(),
            1.0 if self.steps_since_draft is None else self.steps_since_draft / K_NORM,
            self.context_length / settings.context_window,
            self.generated / settings.max_new_tokens,
            settings.temperature / TEMPERATURE_NORM,
            math.log2(max(1, settings.batch_size)) / BATCH_LOG2_NORM,
        ]
        # Clipping keeps the declared range whatever happens (k > 16, a custom context
        # window smaller than the prompt); NaN, from a broken step result, becomes 0.
        return np.nan_to_num(np.clip(np.asarray(features, dtype=np.float32), FEATURE_LOW, FEATURE_HIGH))
