"""Decoding history -> the observation vector. The ONE place features are defined.

The Gymnasium envs and the online :class:`~specrl.engine.SpeculativeDecoder` both build a
:class:`FeatureTracker`, feed it every :class:`StepResult` and hand ``vector()`` to the
controller, so a policy sees exactly the inputs it was trained on. Features use only step
results and the static settings of the generation (never model internals), so any source of
step results (the real loop, a trace replay) produces them.

Every feature lies in [0, 1]. Windows count *steps*, not tokens. "Proposing step" means a
step that proposed at least one draft token; statistics over proposing steps keep their last
value through runs of plain (k = 0) steps, and ``steps_since_draft`` says how stale they are.
A batched step (:meth:`FeatureTracker.update`, one action for every row) is one step: its
counts are the rows' sums in the rates and their means in ``last_*``, the signals of drafted
positions pool every row's, lengths are means over rows, and ``batch_size`` counts the rows.

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
 19   lookup_available        tokens the n-gram lookup could propose now / 16, clipped; 0 when
                              the generation's drafters do not include ``ngram``
 20   acceptance_draft        accepted / proposed over the last 4 proposing steps of ``draft`` (0)
 21   acceptance_draft-mid    the same for ``draft-mid`` (0)
 22   acceptance_draft-int8   the same for ``draft-int8`` (0)
 23   acceptance_draft-int4   the same for ``draft-int4`` (0)
 24   acceptance_ngram        the same for ``ngram`` (0)
 25   acceptance_cascade      the same for ``cascade`` (0)
 26   drafter_draft           1 if the last step drafted with ``draft``, else 0 (0 before a step)
 27   drafter_draft-mid       the same for ``draft-mid``
 28   drafter_draft-int8      the same for ``draft-int8``
 29   drafter_draft-int4      the same for ``draft-int4``
 30   drafter_ngram           the same for ``ngram``
 31   drafter_cascade         the same for ``cascade``
 32   lookup_order            the length of the n-gram the lookup matched now (3, 2, 1) / 3; 0
                              without a match or when the drafters do not include ``ngram``
 33   draft_price             seconds per draft forward over the last 16 steps / the seconds of
                              a one-token verification of the batch now, clipped (the prior's
                              before a draft ran; 0 with neither)
 34   verify_token_price      what one more verified token per row adds to a verification of
                              the batch now / that one-token verification, clipped (the prior's
                              before a step; 0 with neither)
 35   verify_step_2           what the 2nd token per row adds to a verification of the batch
                              now over the 1st, / the one-token verification / 0.5, clipped:
                              the prior's curve (0 without a prior)
 36   verify_step_3           the same for the 3rd token over the 2nd
 37   verify_step_4           the same for the 4th token over the 3rd
 38   verify_step_5           the same for the 5th token over the 4th
 39   verify_step_6           the same for the 6th token over the 5th
 40   verify_step_7           the same for the 7th token over the 6th
 41   verify_step_8           the same for the 8th token over the 7th
 42   verify_step_9           the same for the 9th token over the 8th
 43   priced_k                the k (0..8) a step's expected tokens per second is highest at,
                              under these prices and acceptance_prob_short as each draft
                              token's acceptance, / 16 (0 before a proposing step)
====  ======================  =============================================================

**Prices** (33-43; docs/design.md section 8, "Drafters"): a verification costs ``fixed +
per_token * tokens`` (``tokens``: B rows times the longest row's proposals + 1), fitted over the
last :data:`PRICE_WINDOW` steps' verify seconds by a ridge regression toward a **prior**
:class:`PriceLine`'s relative slope (``per_token / fixed``), worth :data:`PRIOR_STEPS` steps, since
a controller that never changes k never identifies the slope. The prior is the latency model's in
the simulators and the machine's calibration in the engine; before the first step the prices are
the prior's; without one the fit is the data's alone and the prices are 0 until it is identified.
The shape features (35-42) are the prior's curve ``(c(t) - c(t - 1)) / c(1) /`` :data:`STEP_NORM`,
``c(t)`` its seconds for the batch now fed t tokens a row (past its table, the last step repeats).
``priced_k`` takes each draft token as accepted with probability a = acceptance_prob_short, so k
tokens drafted emit ``1 + a + ... + a^k`` per row in ``draft_price * k + c(k + 1) / c(1)``
one-token verifications (without a curve, ``1 + verify_token_price * k``); the smallest best k.

Versions are prefixes: a policy records its version and sees the first ``FEATURE_COUNTS[version]``
features. Changing a definition, the order, or a constant below changes ``FEATURE_VERSION``.
"""

from __future__ import annotations

import functools
import math
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:  # annotations only: the engine's decoder imports this module
    from specrl.engine.generation import Generation
    from specrl.engine.types import StepResult

FEATURE_VERSION = 5

# The drafters, each with features of their own, in order: the one list of them (the engine's
# pool, specrl.engine.drafters.DRAFTERS, is this list; adding a drafter is a new feature version).
FEATURE_DRAFTERS = ("draft", "draft-mid", "draft-int8", "draft-int4", "ngram", "cascade")
LOOKUP_DRAFTER = "ngram"  # the n-gram lookup drafter: its search also feeds the lookup features
Lookup = Callable[[], tuple[float, float]]  # -> (tokens the lookup could propose now, its match order)

SHAPE_TOKENS = 9  # the verification's shape features cover 2..SHAPE_TOKENS tokens a row
STEP_NORM = 0.5  # the shape features are divided by this (larger steps clip to 1)
PRICED_K_MAX = SHAPE_TOKENS - 1  # priced_k chooses among k = 0..PRICED_K_MAX (the curve's tokens)

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
    "lookup_available",
    *(f"acceptance_{name}" for name in FEATURE_DRAFTERS),
    *(f"drafter_{name}" for name in FEATURE_DRAFTERS),
    "lookup_order",
    "draft_price",
    "verify_token_price",
    *(f"verify_step_{tokens}" for tokens in range(2, SHAPE_TOKENS + 1)),
    "priced_k",
)
N_FEATURES = len(FEATURE_NAMES)
# The step history FeatureTracker._account writes by name: the features up to steps_since_draft.
HISTORY = FEATURE_NAMES[: FEATURE_NAMES.index("steps_since_draft") + 1]
FEATURE_COUNTS = {1: 19, 2: 32, 3: 33, 4: 35, 5: N_FEATURES}  # version -> its features: the first that many
PRICED_VERSION = 4  # the first feature version that reads the machine's prices (a prior helps it)
FEATURE_LOW = 0.0  # every feature lies in [FEATURE_LOW, FEATURE_HIGH]
FEATURE_HIGH = 1.0

SHORT_WINDOW = 4  # proposing steps
LONG_WINDOW = 32  # proposing steps
CONFIDENCE_WINDOW = 8  # steps with a rejection / with acceptances
COST_WINDOW = 16  # steps
PRICE_WINDOW = 32  # steps the verification's price line is fitted over
PRIOR_STEPS = 4  # the prior's weight in the price fit: steps one token a row from the window's mean
K_NORM = 16  # token counts and k are divided by this (larger values clip to 1)
TEMPERATURE_NORM = 2.0
BATCH_LOG2_NORM = 8.0
ORDER_NORM = 3  # the n-gram drafter's longest n-gram


@dataclass(frozen=True)
class GenerationSettings:
    """The static facts of a generation that features are normalised by.

    Attributes:
        max_new_tokens: the token budget of the whole episode / generation.
        context_window: the models' context length (tokens).
        vocab_size: the shared vocabulary (entropy is divided by its log).
        temperature: sampling temperature (0 = greedy).
        batch_size: sequences decoded together.
        drafters: the drafters the controller may choose (the lookup features need ``ngram``).
    """

    max_new_tokens: int
    context_window: int
    vocab_size: int
    temperature: float = 0.0
    batch_size: int = 1
    drafters: tuple[str, ...] = ("draft",)

    @classmethod
    def of(
        cls,
        generation: Generation,
        max_new_tokens: int | None = None,
        drafters: tuple[str, ...] = ("draft",),
    ) -> GenerationSettings:
        """Settings of an engine generation (batched or not); ``max_new_tokens`` overrides its own budget."""
        return cls(
            max_new_tokens=max_new_tokens or generation.max_new_tokens,
            context_window=generation.pair.context_length,
            vocab_size=generation.pair.vocab_size,
            temperature=generation.sampling.temperature,
            batch_size=generation.batch_size,
            drafters=tuple(drafters),
        )


def _rate(numerators: Iterable[float], denominators: Iterable[float]) -> float:
    """sum(numerators) / sum(denominators), 0 when the denominator is 0."""
    denominator = sum(denominators)
    return sum(numerators) / denominator if denominator > 0 else 0.0


class _Step(NamedTuple):
    """What the features read of one step, summed over the rows of a batched step (a tuple: the
    simulators build one per step, tens of thousands a second)."""

    action: Any
    rows: int
    proposed: int
    accepted: int
    emitted: int
    context_length: int  # summed over rows
    draft_forwards: int  # the batch's draft forwards (the rows share them)
    draft_seconds: float
    verify_seconds: float
    confidences: list[float]  # every row's drafted positions
    entropies: list[float]
    acceptance_prob_sum: float
    rejected_confidences: list[float]  # per row with a rejection: its first rejected token's confidence
    accepted_confidence_sum: float
    stopped: int  # rows whose drafting ended early
    fed: int  # tokens the verification was fed: rows x (the longest row's proposals + 1)

    @classmethod
    def of(cls, results: Sequence[StepResult]) -> _Step:
        """The rows' results summed, in one pass (a single sequence's step is one row)."""
        proposed = accepted = emitted = context_length = forwards = stopped = longest = 0
        probs = accepted_confidence = 0.0
        confidences: list[float] = []
        entropies: list[float] = []
        rejected: list[float] = []
        for r in results:
            proposed += r.proposed
            longest = max(longest, r.proposed)
            accepted += r.accepted
            emitted += r.emitted
            context_length += r.context_length
            forwards = max(forwards, len(r.confidences))  # StepResult.draft_forwards; rows share them
            confidences += r.confidences
            entropies += r.entropies
            probs += sum(r.acceptance_probs)
            if r.accepted < r.proposed:
                rejected.append(r.confidences[r.accepted])
            accepted_confidence += sum(r.confidences[: r.accepted])
            stopped += r.stopped_by_tau
        first = results[0]
        return cls(
            first.action,
            len(results),
            proposed,
            accepted,
            emitted,
            context_length,
            forwards,
            first.draft_seconds,
            first.verify_seconds,
            confidences,
            entropies,
            probs,
            rejected,
            accepted_confidence,
            stopped,
            len(results) * (longest + 1),
        )


class PriceLine(NamedTuple):
    """A machine's prices at a batch size, in seconds: a verification fed ``tokens`` tokens costs
    ``fixed + per_token * tokens``, a draft forward ``draft_forward``; ``curve``, when known, is
    the verification's seconds at 1, 2, ... tokens a row
    (:meth:`specrl.latency.LatencyModel.price_line` gives a latency model's)."""

    draft_forward: float
    fixed: float
    per_token: float
    curve: tuple[float, ...] = ()

    def ratios(self, rows: int) -> tuple[float, float]:
        """(draft_price, verify_token_price) at ``rows`` rows: each over a one-token verification."""
        one_token = self.fixed + self.per_token * rows
        if one_token <= 0:
            return 0.0, 0.0
        return self.draft_forward / one_token, self.per_token * rows / one_token

    def relative_curve(self, rows: int = 1) -> list[float] | None:
        """The verification's seconds at 1..:data:`SHAPE_TOKENS` tokens a row over one token's
        (beyond the curve, its last step repeats); None without a curve."""
        curve = self.curve
        if len(curve) < 2 or curve[0] <= 0:
            return None
        relative = [1.0]
        for step in self.shape():
            relative.append(relative[-1] + step * STEP_NORM)
        return relative

    def shape(self) -> list[float]:
        """The verification's shape features (the module doc), unclipped: what each token from the
        2nd to the :data:`SHAPE_TOKENS`-th a row adds, over one token's seconds / STEP_NORM; 0
        without a curve."""
        curve = self.curve
        if len(curve) < 2 or curve[0] <= 0:
            return [0.0] * (SHAPE_TOKENS - 1)
        steps = [later - earlier for earlier, later in zip(curve[:-1], curve[1:], strict=True)][
            : SHAPE_TOKENS - 1
        ]
        steps += [steps[-1]] * (SHAPE_TOKENS - 1 - len(steps))
        return [step / curve[0] / STEP_NORM for step in steps]


Prices = Callable[[int, float], PriceLine]  # (rows, context length) -> the prior there


@functools.lru_cache(maxsize=4096)
def _prior_shape(prior: PriceLine) -> tuple[list[float], list[float] | None]:
    """A prior's shape features and relative curve (read only: a served request's features ask
    the prior on every step, mostly for lines already seen)."""
    return prior.shape(), prior.relative_curve()


class VerifyPrice:
    """The verification's price line, ``seconds = fixed + per_token * tokens``, fitted over the last
    :data:`PRICE_WINDOW` steps (running sums: the simulators add tens of thousands of steps a
    second). ``tokens`` is an integer, so the sums over it are exact."""

    __slots__ = ("points", "n", "sx", "sy", "sxx", "sxy")

    def __init__(self) -> None:
        self.points: deque[tuple[int, float]] = deque()
        self.n, self.sx, self.sy, self.sxx, self.sxy = 0, 0, 0.0, 0, 0.0

    def add(self, tokens: int, seconds: float) -> None:
        """One step's verified tokens and seconds (a step without a timing is skipped)."""
        if not seconds > 0:
            return
        self.points.append((tokens, seconds))
        self._sum(tokens, seconds, 1)
        if len(self.points) > PRICE_WINDOW:
            self._sum(*self.points.popleft(), -1)

    def _sum(self, tokens: int, seconds: float, sign: int) -> None:
        self.n += sign
        self.sx += sign * tokens
        self.sy += sign * seconds
        self.sxx += sign * tokens * tokens
        self.sxy += sign * tokens * seconds

    def fit(self, relative_slope: float | None = None, rows: int = 1) -> tuple[float, float] | None:
        """(fixed, per_token) seconds, per_token at least 0, or None.

        With ``relative_slope`` (the prior's ``per_token / fixed``), a ridge regression: the slope
        is pulled toward the line of that shape through the window's mean, with the weight of
        :data:`PRIOR_STEPS` steps one token a row (``rows``) from the mean; None only before any
        step. Without it, least squares, None while the window's steps all verified the same
        number of tokens (the slope is not identified)."""
        n = self.n
        if n == 0:
            return None
        spread = n * self.sxx - self.sx * self.sx  # n^2 times the variance of tokens: an integer
        covariance = n * self.sxy - self.sx * self.sy  # n^2 times the covariance
        mean_tokens, mean_seconds = self.sx / n, self.sy / n
        if relative_slope is None:
            if n < 2 or spread <= 0:
                return None
            per_token = max(0.0, covariance / spread)
        else:
            prior = relative_slope * mean_seconds / (1 + relative_slope * mean_tokens)
            weight = PRIOR_STEPS * rows * rows * n  # in the units of spread / n
            per_token = max(0.0, (covariance + weight * prior) / (spread + weight))
        return mean_seconds - per_token * mean_tokens, per_token


class FeatureTracker:
    """Running statistics of one generation (or episode), turned into the feature vector.

    Usage::

        tracker = FeatureTracker(GenerationSettings.of(generation), prompt_length)
        while not generation.done:
            step = generation.step(controller.act(tracker.vector()))
            tracker.update(step.results)
            controller.observe(step.merged())

    Window statistics are aggregated in ``update`` (once per step, over windows of at most
    32 entries), so ``vector`` only assembles numbers: the trace-replay simulator calls both
    tens of thousands of times a second.
    """

    def __init__(
        self,
        settings: GenerationSettings,
        prompt_length: int,
        lookup: Lookup | None = None,
        prices: Prices | None = None,
    ) -> None:
        self.reset(settings, prompt_length, lookup, prices)

    def reset(
        self,
        settings: GenerationSettings,
        prompt_length: int,
        lookup: Lookup | None = None,
        prices: Prices | None = None,
    ) -> None:
        """Forget all history: a new generation of ``prompt_length`` prompt tokens starts.
        ``lookup()`` answers what the n-gram lookup finds now: (tokens it could propose, the
        order of its match), (0, 0) without one (asked by :meth:`vector` when
        ``settings.drafters`` include ``ngram``). ``prices(rows, context)`` is the prior of the
        price features (the module doc), asked now and whenever the batch's rows change."""
        self.settings = settings
        self.prices_at = prices
        self.lookup = lookup if LOOKUP_DRAFTER in settings.drafters else None
        # per drafter: (accepted, proposed) of its last proposing steps; the last step's drafter
        self.by_drafter = {name: deque(maxlen=SHORT_WINDOW) for name in FEATURE_DRAFTERS}
        self.pool_history = [0.0] * (2 * len(FEATURE_DRAFTERS))
        self.context_length = prompt_length
        self.batch_size = settings.batch_size  # rows now (a batched step updates it)
        self.generated = 0.0
        self.steps_since_draft: int | None = None
        # per proposing step: accepted, proposed, sum of acceptance probabilities
        self.proposing_accepted: deque[int] = deque(maxlen=LONG_WINDOW)
        self.proposing_proposed: deque[int] = deque(maxlen=LONG_WINDOW)
        self.proposing_probs: deque[float] = deque(maxlen=LONG_WINDOW)
        self.rejected_confidences: deque[float] = deque(maxlen=CONFIDENCE_WINDOW)
        # per step with acceptances: sum of accepted confidences, accepted count
        self.accepted_confidence_sums: deque[float] = deque(maxlen=CONFIDENCE_WINDOW)
        self.accepted_counts: deque[int] = deque(maxlen=CONFIDENCE_WINDOW)
        # per step: draft seconds (of steps that ran the draft), draft forwards, verify seconds
        self.draft_seconds: deque[float] = deque(maxlen=COST_WINDOW)
        self.draft_forwards: deque[int] = deque(maxlen=COST_WINDOW)
        self.verify_seconds: deque[float] = deque(maxlen=COST_WINDOW)
        self.verify_price = VerifyPrice()
        self.prior: PriceLine | None = None
        self.shape = [0.0] * (SHAPE_TOKENS - 1)  # the prior's shape features
        self.curve: list[float] | None = None  # the prior's relative curve, for priced_k
        self.price_line: tuple[float, float] | None = None  # the last fitted (fixed, per_token)
        self._ask_prior()
        self.log_vocab = math.log(max(2, settings.vocab_size))
        # the step-history features (HISTORY), written by name in _account (the rest: vector())
        self.history = dict.fromkeys(HISTORY, 0.0)
        self.history["steps_since_draft"] = 1.0  # no draft yet: as stale as it gets

    def set_context_length(self, length: int) -> None:
        """The sequence changed outside a step (an env appended text); record its new length."""
        self.context_length = length

    def set_rows(self, batch_size: int, context_length: float, generated: float) -> None:
        """A batch's rows changed outside a step (requests joined or left): its size, and its
        rows' mean sequence length and mean tokens generated."""
        rows_changed = batch_size != self.batch_size
        self.batch_size, self.context_length, self.generated = batch_size, context_length, generated
        if rows_changed:
            self._ask_prior()

    def _ask_prior(self) -> None:
        """The prior price line at the batch now (see the module doc), and the fit under it."""
        if self.prices_at is not None:
            self.prior = self.prices_at(max(1, self.batch_size), self.context_length)
            self.shape, self.curve = _prior_shape(self.prior)
            self._fit_prices()

    def _fit_prices(self) -> None:
        prior = self.prior
        relative = None if prior is None or prior.fixed <= 0 else prior.per_token / prior.fixed
        self.price_line = self.verify_price.fit(relative, max(1, self.batch_size)) or self.price_line

    def update(self, results: Sequence[StepResult]) -> None:
        """Account for one step: ``results`` has one entry per row, all of one action (a single
        sequence is a batch of one).

        The batch is one step: rates over proposing steps use the rows' sums (the batch's
        acceptance), the last step's counts are means over rows, the signals of drafted
        positions pool every row's, and the batch size is the number of rows."""
        if not results:
            raise ValueError("a step has at least one row")
        if len(results) != self.batch_size:
            self.batch_size = len(results)
            self._ask_prior()
        self._account(_Step.of(results))

    def _account(self, step: _Step) -> None:
        history = self.history
        rows = step.rows
        self.generated += step.emitted / rows
        self.context_length = step.context_length / rows + step.emitted / rows
        accepted, proposed = step.accepted, step.proposed
        confidences = step.confidences
        if step.draft_forwards:
            self.steps_since_draft = 0
            history["confidence_mean"] = sum(confidences) / len(confidences)
            history["confidence_min"] = min(confidences)
            history["entropy_mean"] = sum(step.entropies) / len(step.entropies) / self.log_vocab
        elif self.steps_since_draft is not None:
            self.steps_since_draft += 1
        if proposed:
            self.proposing_accepted.append(accepted)
            self.proposing_proposed.append(proposed)
            self.proposing_probs.append(step.acceptance_prob_sum)
            short_proposed = list(self.proposing_proposed)[-SHORT_WINDOW:]
            history["acceptance_short"] = _rate(list(self.proposing_accepted)[-SHORT_WINDOW:], short_proposed)
            history["acceptance_long"] = _rate(self.proposing_accepted, self.proposing_proposed)
            history["acceptance_prob_short"] = _rate(
                list(self.proposing_probs)[-SHORT_WINDOW:], short_proposed
            )
        if step.rejected_confidences:
            self.rejected_confidences.append(sum(step.rejected_confidences) / len(step.rejected_confidences))
            history["rejected_confidence"] = sum(self.rejected_confidences) / len(self.rejected_confidences)
        if accepted:
            self.accepted_confidence_sums.append(step.accepted_confidence_sum)
            self.accepted_counts.append(accepted)
            history["accepted_confidence"] = _rate(self.accepted_confidence_sums, self.accepted_counts)
        self.draft_seconds.append(step.draft_seconds if step.draft_forwards else 0.0)
        self.draft_forwards.append(step.draft_forwards)
        self.verify_seconds.append(step.verify_seconds)
        history["cost_ratio"] = self._cost_ratio()
        self.verify_price.add(step.fed, step.verify_seconds)
        self._fit_prices()
        history["last_proposed"] = proposed / rows / K_NORM
        history["last_accepted"] = accepted / rows / K_NORM
        history["last_k"] = step.action.k / K_NORM
        history["last_tau"] = step.action.tau
        history["last_stopped_by_tau"] = step.stopped / rows
        history["steps_since_draft"] = (
            1.0 if self.steps_since_draft is None else self.steps_since_draft / K_NORM
        )
        self._update_pool(step.action.drafter, accepted, proposed)

    def _update_pool(self, drafter: str, accepted: int, proposed: int) -> None:
        pool, n = self.pool_history, len(FEATURE_DRAFTERS)
        index = FEATURE_DRAFTERS.index(drafter) if drafter in FEATURE_DRAFTERS else None
        if index is not None and proposed:
            window = self.by_drafter[drafter]
            window.append((accepted, proposed))
            pool[index] = _rate((a for a, _ in window), (m for _, m in window))
        pool[n:] = [0.0] * n
        if index is not None:
            pool[n + index] = 1.0

    def _draft_per_forward(self) -> float | None:
        """Seconds per draft forward over the last :data:`COST_WINDOW` steps; None without one."""
        draft_forwards = sum(self.draft_forwards)
        return sum(self.draft_seconds) / draft_forwards if draft_forwards else None

    def _cost_ratio(self) -> float:
        per_forward = self._draft_per_forward()
        verify_seconds = sum(self.verify_seconds)
        if per_forward is None or verify_seconds <= 0:
            return 0.0
        return per_forward / (verify_seconds / len(self.verify_seconds))

    def prices(self) -> tuple[float, float]:
        """(draft_price, verify_token_price) for the batch now, unclipped (see the module doc):
        the fitted line's, with the measured draft forward (the prior's draft price while the last
        steps ran none); the prior's before any step; 0 for what is not known."""
        rows = max(1, self.batch_size)
        prior = (0.0, 0.0) if self.prior is None else self.prior.ratios(rows)
        if self.price_line is None:
            return prior
        fixed, per_token = self.price_line
        one_token = fixed + per_token * rows  # a verification of one token per row
        if one_token <= 0:
            return prior
        per_forward = self._draft_per_forward()
        draft_price = prior[0] if per_forward is None else per_forward / one_token
        return draft_price, per_token * rows / one_token

    def priced_k(self, draft_price: float, verify_token_price: float) -> int:
        """The k a step's expected tokens per second is highest at (the module doc)."""
        acceptance = self.history["acceptance_prob_short"]
        if acceptance <= 0:
            return 0
        curve = self.curve
        best_k, best_rate, expected, term = 0, 0.0, 0.0, 1.0
        for k in range(PRICED_K_MAX + 1):
            expected += term  # 1 + a + ... + a^k
            term *= acceptance
            verify = curve[k] if curve is not None else 1 + verify_token_price * k
            rate = expected / (draft_price * k + verify)
            if rate > best_rate * (1 + 1e-9):
                best_k, best_rate = k, rate
        return best_k

    def vector(self) -> np.ndarray:
        """The observation now: float32 array of shape (N_FEATURES,), every entry in [0, 1]."""
        settings = self.settings
        available, order = self.lookup() if self.lookup is not None else (0, 0)
        draft_price, verify_token_price = self.prices()
        features = np.array(
            [
                *self.history.values(),
                self.context_length / settings.context_window,
                self.generated / settings.max_new_tokens,
                settings.temperature / TEMPERATURE_NORM,
                math.log2(max(1, self.batch_size)) / BATCH_LOG2_NORM,
                available / K_NORM,
                *self.pool_history,
                order / ORDER_NORM,
                draft_price,
                verify_token_price,
                *self.shape,
                self.priced_k(draft_price, verify_token_price) / K_NORM,
            ],
            dtype=np.float32,
        )
        # Clipping keeps the declared range whatever happens (k > 16, a custom context window
        # smaller than the prompt); fmax/fmin also turn NaN, from a broken step result, into 0.
        return np.fmin(np.fmax(features, FEATURE_LOW), FEATURE_HIGH)
