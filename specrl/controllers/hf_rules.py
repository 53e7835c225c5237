"""The peers: the draft-length and confidence-threshold rules of Hugging Face assisted generation,
rewritten in our words from the public source of transformers 5.24
(``generation/candidate_generator.py``, ``AssistedCandidateGenerator.update_candidate_strategy``:
the ``"heuristic"`` schedule and the dynamic confidence threshold, verified equal to HF's own,
run with scikit-learn, on thousands of random histories; ``stopping_criteria.ConfidenceCriteria``:
how the threshold cuts drafting). The defaults are HF's: 20 assistant tokens, threshold 0.4.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from specrl.engine.types import Action, StepResult

#: HF's default draft length (``num_assistant_tokens``).
HF_NUM_ASSISTANT_TOKENS = 20
#: HF's default starting confidence threshold (``assistant_confidence_threshold``).
HF_CONFIDENCE_THRESHOLD = 0.4
#: HF weighs a false negative three times a false positive when it picks the threshold.
HF_FALSE_NEGATIVE_COST = 3.0
#: HF re-chooses the threshold only once its history holds more than 5 drafted tokens.
HF_MIN_ROC_SAMPLES = 6


def roc_curve(
    labels: Sequence[int] | np.ndarray, scores: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC curve ``(fpr, tpr, thresholds)`` of "positive when score >= threshold": one point per
    distinct score, thresholds decreasing, after (0, 0) at +inf; the points of
    ``sklearn.metrics.roc_curve(labels, scores, drop_intermediate=False)``, in numpy.

    Raises:
        ValueError: if the lengths differ, or the labels are not all 0/1 with both present.
    """
    y = np.asarray(labels)
    s = np.asarray(scores, dtype=np.float64)
    if y.shape != s.shape or y.ndim != 1:
        raise ValueError(f"labels and scores must be 1-D of equal length, got {y.shape} and {s.shape}")
    if not np.isin(y, (0, 1)).all() or not (y == 0).any() or not (y == 1).any():
        raise ValueError("labels must be 0/1 and contain both classes")
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order].astype(np.int64)
    # The last index of each run of equal scores: lowering the threshold to that score
    # admits the whole run at once.
    last_of_run = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]
    true_positives = np.cumsum(y)[last_of_run]
    false_positives = last_of_run + 1 - true_positives
    tpr = np.r_[0, true_positives] / true_positives[-1]
    fpr = np.r_[0, false_positives] / false_positives[-1]
    return fpr, tpr, np.r_[np.inf, s[last_of_run]]


def min_cost_threshold(
    labels: Sequence[int] | np.ndarray,
    scores: Sequence[float] | np.ndarray,
    false_negative_cost: float = HF_FALSE_NEGATIVE_COST,
) -> float:
    """The ROC threshold minimising ``fpr + false_negative_cost * fnr`` (HF's rule), ties to the
    highest threshold, as ``np.argmin`` over sklearn's curve (the midpoints its default
    ``drop_intermediate=True`` drops are never the first minimum of a linear cost). ``labels``: 1
    for a matched draft token, 0 for the first rejected one; ``scores``: their confidences."""
    fpr, tpr, thresholds = roc_curve(labels, scores)
    cost = fpr + false_negative_cost * (1.0 - tpr)
    return float(thresholds[int(np.argmin(cost))])


def _clamp_k(k: int, k_max: int | None) -> int:
    return k if k_max is None else min(k, k_max)


def _heuristic_next_k(k: int, result: StepResult, k_max: int | None) -> int:
    """HF's ``"heuristic"`` schedule for one verification: +2 on full acceptance, else -1 (floor 1)."""
    if result.proposed == 0:  # no draft to judge (see HFHeuristicController)
        return k
    if result.accepted == result.proposed:
        return _clamp_k(k + 2, k_max)
    return max(1, k - 1)


def _check_draft_length(num_assistant_tokens: int, k_max: int | None) -> None:
    if num_assistant_tokens < 1:
        raise ValueError(f"num_assistant_tokens must be >= 1, got {num_assistant_tokens}")
    if k_max is not None and k_max < 1:
        raise ValueError(f"k_max must be >= 1 or None, got {k_max}")


class HFHeuristicController:
    """HF's ``num_assistant_tokens_schedule="heuristic"``: after each verification, ``k += 2`` if
    every drafted token was accepted, else ``k = max(1, k - 1)``; k starts at
    ``min(num_assistant_tokens, k_max)``, tau stays fixed.

    Differences from HF, all deliberate: k is capped at ``k_max`` (None: no cap) to share the
    other controllers' action space; a step that proposed nothing (a ``tau`` cut at the first
    position) leaves k unchanged, where HF counts its empty draft as all accepted; k restarts
    every generation (HF's ``"heuristic_transient"``) unless ``persist_across_generations``
    (HF's ``"heuristic"``); HF's default 0.4 confidence threshold is left out (a fixed ``tau``,
    default 0): ``HFConfidenceController(heuristic_k=True)`` combines the two as HF does.
    """

    def __init__(
        self,
        num_assistant_tokens: int = HF_NUM_ASSISTANT_TOKENS,
        k_max: int | None = 8,
        tau: float = 0.0,
        persist_across_generations: bool = False,
    ) -> None:
        _check_draft_length(num_assistant_tokens, k_max)
        self.num_assistant_tokens = num_assistant_tokens
        self.k_max = k_max
        self.initial_k = _clamp_k(num_assistant_tokens, k_max)
        Action(self.initial_k, tau)  # validates tau
        self.tau = float(tau)
        self.persist_across_generations = persist_across_generations
        self.k = self.initial_k

    @property
    def name(self) -> str:
        """Short label for tables."""
        return "hf-heuristic"

    def reset(self) -> None:
        """Restart k at its initial value, unless it persists across generations."""
        if not self.persist_across_generations:
            self.k = self.initial_k

    def act(self, observation: Any) -> Action:
        """The current k and the fixed tau; the observation is not used."""
        return Action(self.k, self.tau)

    def observe(self, result: StepResult) -> None:
        """Apply the +2 / -1 rule to the verification's outcome."""
        self.k = _heuristic_next_k(self.k, result, self.k_max)

    def __repr__(self) -> str:
        return (
            f"HFHeuristicController(num_assistant_tokens={self.num_assistant_tokens}, k_max={self.k_max}, "
            f"tau={self.tau}, persist_across_generations={self.persist_across_generations})"
        )


class HFConfidenceController:
    """HF's dynamic assistant confidence threshold, as ``tau``, with a constant draft length.

    For the whole generation it keeps (confidence, matched) samples: after a verification that
    proposed m tokens and accepted a, the a accepted ones labelled 1 and, if a < m, the first
    rejected one labelled 0. Once there are at least 6 samples of both labels, tau becomes the
    ROC threshold minimising ``fpr + 3 * fnr`` (:func:`min_cost_threshold`), recomputed after
    every verification; until then it stays at 0.4. k is ``min(num_assistant_tokens, k_max)``.

    Differences from HF: our engine stops *before* a token under the threshold (docs/design.md
    section 2), HF after proposing it, so that token's outcome is never recorded and tau never
    falls below its start here; the confidence is ``max_v q(v)`` (HF: the chosen token's
    probability; equal when greedy); k is capped at ``k_max`` and, with ``heuristic_k``, moves
    by :class:`HFHeuristicController`'s rule; the ROC curve needs no scikit-learn (HF keeps 0.4
    without it); :meth:`reset` starts a new history, as HF's per-call candidate generator does.
    """

    def __init__(
        self,
        initial_threshold: float = HF_CONFIDENCE_THRESHOLD,
        num_assistant_tokens: int = HF_NUM_ASSISTANT_TOKENS,
        k_max: int | None = 8,
        false_negative_cost: float = HF_FALSE_NEGATIVE_COST,
        heuristic_k: bool = False,
    ) -> None:
        if not 0.0 < initial_threshold <= 1.0:
            raise ValueError(f"initial_threshold must lie in (0, 1], got {initial_threshold}")
        if false_negative_cost <= 0:
            raise ValueError(f"false_negative_cost must be > 0, got {false_negative_cost}")
        _check_draft_length(num_assistant_tokens, k_max)
        self.initial_threshold = float(initial_threshold)
        self.num_assistant_tokens = num_assistant_tokens
        self.k_max = k_max
        self.false_negative_cost = false_negative_cost
        self.heuristic_k = heuristic_k
        self.initial_k = _clamp_k(num_assistant_tokens, k_max)
        self.k = self.initial_k
        self.tau = self.initial_threshold
        self._confidences: list[float] = []
        self._matched: list[int] = []

    @property
    def name(self) -> str:
        """Short label for tables."""
        return "hf-confidence-heuristic" if self.heuristic_k else "hf-confidence"

    @property
    def history(self) -> tuple[tuple[float, ...], tuple[int, ...]]:
        """The recorded (confidences, matched labels) of this generation, oldest first."""
        return tuple(self._confidences), tuple(self._matched)

    def reset(self) -> None:
        """Back to the initial threshold and k, with an empty history."""
        self.k = self.initial_k
        self.tau = self.initial_threshold
        self._confidences.clear()
        self._matched.clear()

    def act(self, observation: Any) -> Action:
        """The current k and threshold; the observation is not used."""
        return Action(self.k, self.tau)

    def observe(self, result: StepResult) -> None:
        """Record the verified tokens' confidences and outcomes, then re-choose the threshold."""
        labelled = min(result.accepted + 1, result.proposed)  # accepted run + first rejection
        self._confidences.extend(result.confidences[:labelled])
        self._matched.extend([1] * result.accepted + [0] * (labelled - result.accepted))
        if len(self._matched) >= HF_MIN_ROC_SAMPLES and 0 in self._matched and 1 in self._matched:
            # Recorded confidences are probabilities, so the threshold is a valid tau.
            self.tau = min(
                1.0, max(0.0, min_cost_threshold(self._matched, self._confidences, self.false_negative_cost))
            )
        if self.heuristic_k:
            self.k = _heuristic_next_k(self.k, result, self.k_max)

    def __repr__(self) -> str:
        return (
            f"HFConfidenceController(initial_threshold={self.initial_threshold}, "
            f"num_assistant_tokens={self.num_assistant_tokens}, k_max={self.k_max}, "
            f"false_negative_cost={self.false_negative_cost}, heuristic_k={self.heuristic_k})"
        )
