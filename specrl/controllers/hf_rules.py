"""The peers: the draft-length and confidence-threshold rules of Hugging Face assisted generation.

Rewritten from the public source of transformers 5.24
(``transformers/generation/candidate_generator.py``, ``AssistedCandidateGenerator``), in
our own words and on our engine's :class:`Action` / :class:`StepResult`:

- ``__init__`` lines 117-119: the draft length starts at ``num_assistant_tokens`` and the
  confidence threshold at ``assistant_confidence_threshold``; their defaults are 20 and
  0.4 (``configuration_utils.py`` lines 638-640), with the schedule ``"constant"``.
- ``update_candidate_strategy`` lines 239-247: the ``"heuristic"`` schedule.
- ``update_candidate_strategy`` lines 251-283 with ``_generate_candidates`` lines 323-336:
  the dynamic confidence threshold (verified equal to HF's own ``update_candidate_strategy``,
  run with scikit-learn, on thousands of random histories).
- ``stopping_criteria.py`` lines 596-614 (``ConfidenceCriteria``) and ``utils.py`` lines
  1692-1699: how the threshold cuts drafting.
- ``utils.py`` line 4185: the strategy is updated once per verification with the
  number of matched draft tokens; lines 4245-4252: only the ``"heuristic"`` schedule
  carries its draft length over to the next ``generate`` call.
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
    """ROC curve of the rule "predict positive when score >= threshold".

    One point per distinct score, thresholds in decreasing order, preceded by the point
    (0, 0) at threshold +inf: the same points as
    ``sklearn.metrics.roc_curve(labels, scores, drop_intermediate=False)``, with numpy only.

    Args:
        labels: (n,) 1 for a positive (the draft token matched), 0 for a negative.
        scores: (n,) the score of each sample (the draft's confidence).

    Returns:
        ``(fpr, tpr, thresholds)``, each of shape (d + 1,) for d distinct scores.

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
    """The ROC threshold minimising ``fpr + false_negative_cost * fnr`` (HF's rule).

    Ties go to the highest threshold (the first minimum in decreasing threshold order, as
    ``np.argmin`` over sklearn's curve does). sklearn's default ``drop_intermediate=True``
    removes only points that are the midpoint of their two neighbours; the cost is linear in
    (fpr, tpr), so such a point is never the *first* minimum and dropping it changes nothing.
    The +inf point costs ``false_negative_cost`` and the last point (fpr = tpr = 1) costs 1,
    so for a cost above 1 the answer is always one of the observed scores.

    Args:
        labels: (n,) 1 for a matched draft token, 0 for the first rejected one.
        scores: (n,) the draft's confidence in each of those tokens.
        false_negative_cost: weight of the false-negative rate relative to the false-positive rate.

    Returns:
        The chosen threshold.
    """
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
    """HF's ``num_assistant_tokens_schedule="heuristic"``: +2 after a fully accepted draft, else -1.

    The rule, after each verification (HF ``update_candidate_strategy``, lines 239-247):
    if every drafted token was accepted, ``k += 2``; otherwise ``k = max(1, k - 1)``.
    k starts at ``min(num_assistant_tokens, k_max)``; tau stays fixed.

    Differences from HF, all deliberate:
        - HF never caps k (only the remaining length does). Here k is capped at ``k_max``
          (default 8) so the peer acts in the same action space as the other controllers
          and the learned policy; ``k_max=None`` removes the cap. The cap applies to the
          state, so after a run of full acceptances one rejection lowers k below ``k_max``
          at once.
        - A step that proposed nothing leaves k unchanged. In HF an empty draft only
          happens when the length budget is spent, where it counts as "all accepted" and
          adds 2 on the way out; here an empty draft can also come from a ``tau`` cut at
          the first position, which is no evidence that drafting more would pay.
        - HF's ``"heuristic"`` schedule carries k over to the next ``generate`` call,
          ``"heuristic_transient"`` restarts it. Both apply the same rule within a
          generation. The default here is the transient one, so that generations (and env
          episodes) are independent of the order they run in; ``persist_across_generations=True``
          gives HF's ``"heuristic"``.
        - HF's defaults also apply a 0.4 confidence threshold to drafting, adapted as in
          :class:`HFConfidenceController`; this controller keeps the schedule alone, with a
          fixed ``tau`` (default 0: no cut). ``HFConfidenceController(heuristic_k=True)``
          combines the two as HF does.

    Args:
        num_assistant_tokens: starting draft length (HF's default 20).
        k_max: cap on k, or None for none.
        tau: fixed confidence cut in [0, 1].
        persist_across_generations: keep k through :meth:`reset` (HF ``"heuristic"``).
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

    HF's rule (``update_candidate_strategy`` lines 251-283, ``_generate_candidates`` lines
    323-336), in our terms. The controller keeps, for the whole generation, a list of
    (confidence, matched) samples. After each verification that proposed m tokens of
    which a were accepted, it adds the confidences of the a accepted tokens with label 1
    and, if a < m, the confidence of the first rejected token with label 0; tokens drafted
    after the first rejection are dropped (their outcome says nothing about the draft on
    the target's path). Once the list holds at least 6 samples and both labels, tau
    becomes the threshold on the ROC curve of those samples that minimises
    ``fpr + 3 * fnr`` (:func:`min_cost_threshold`), recomputed after every verification.
    Until then tau stays at its last value, 0.4 at the start. k is constant:
    ``min(num_assistant_tokens, k_max)``.

    Differences from HF:
        - Where the cut falls. HF's ``ConfidenceCriteria`` checks a token *after* drafting
          it, so the draft token whose probability fell below the threshold is still
          proposed (and its outcome recorded), and drafting stops after it. Our engine stops
          *before* that token (docs/design.md section 2), so it is never proposed nor recorded:
          the engine reports its confidence but not whether it would have matched. Every
          recorded confidence is therefore at least the tau in force when it was drafted,
          and since the candidates are recorded confidences, tau never falls below its
          starting value here, while HF's can. Exact parity would need an engine option to
          propose the first low-confidence token and then stop.
        - The confidence. HF records the assistant's probability, after the logits
          processors, of the token it chose; our engine reports ``max_v q(v)`` after the
          same processing. For greedy decoding the chosen token is the argmax and the two
          coincide; when sampling, ours is >= HF's.
        - k. HF drafts up to 20 tokens by default and never caps them; here k is capped at
          ``k_max`` (default 8, None for no cap) to share the action space of the other
          controllers. With ``heuristic_k=True``, k follows :class:`HFHeuristicController`'s
          rule as well, as HF does when both settings are on.
        - No optional dependency. HF adapts the threshold only when scikit-learn is
          installed (otherwise it keeps 0.4 fixed); here the ROC curve is computed with
          numpy and the rule always runs.
        - Scope of the history. HF builds a new candidate generator for every ``generate``
          call and writes the adapted threshold into a copy of the assistant's generation
          config, so each call starts again from 0.4 with an empty history (whatever the
          config's docstring says about persistence). :meth:`reset` does the same.

    Args:
        initial_threshold: tau before the first update, in (0, 1] (HF's default 0.4). HF
            disables the adaptation when the threshold is 0; use a static or heuristic
            controller for that.
        num_assistant_tokens: the draft length (HF's default 20), capped at ``k_max``.
        k_max: cap on k, or None for none.
        false_negative_cost: weight of the false-negative rate in the cost (HF: 3).
        heuristic_k: also move k by HF's +2 / -1 heuristic (restarted by :meth:`reset`).
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
