"""The engine's value types: the action a controller picks, and what one step reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch


@runtime_checkable
class StopRule(Protocol):
    """A per-token stop decision, asked after each drafted token with its ``position`` (0 for the
    first), the draft's ``confidence`` max_v q(v) and the ``entropy`` of q (nats). True stops
    drafting before that token, as the tau cut does. The trace replay asks the same rule with the
    recorded signals, so the decision replays exactly."""

    def __call__(self, position: int, confidence: float, entropy: float) -> bool: ...


DEFAULT_DRAFTER = "draft"


@dataclass(frozen=True)
class Action:
    """How far to speculate in one iteration, and with what.

    Attributes:
        k: most draft tokens to propose (0: a plain target step).
        tau: confidence cut in [0, 1]: drafting stops before a token whose max_v q(v) is below tau.
        stop: an optional :class:`StopRule` asked after each drafted token; not part of equality.
        drafter: the name of the drafter that proposes (:data:`specrl.engine.drafters.DRAFTERS`).
    """

    k: int
    tau: float = 0.0
    stop: StopRule | None = field(default=None, compare=False)
    drafter: str = DEFAULT_DRAFTER

    def __post_init__(self) -> None:
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 0:
            raise ValueError(f"Action.k must be an int >= 0, got {self.k!r}")
        if not 0.0 <= float(self.tau) <= 1.0:
            raise ValueError(f"Action.tau must lie in [0, 1], got {self.tau!r}")
        if self.stop is not None and not callable(self.stop):
            raise ValueError(
                f"Action.stop must be a StopRule, called as stop(position, confidence, entropy) -> bool; "
                f"got {self.stop!r}"
            )
        if not isinstance(self.drafter, str) or not self.drafter:
            raise ValueError(
                f"Action.drafter must be a drafter's name, e.g. 'draft' or 'ngram'; got {self.drafter!r}"
            )

    @property
    def needs_signals(self) -> bool:
        """Whether the cut reads each drafted position's signals before drafting on (tau or a stop
        rule); without one, a drafter reads them once per step (:mod:`specrl.engine.signals`)."""
        return self.tau > 0 or self.stop is not None

    def halts(self, position: int, confidence: float, entropy: float) -> bool:
        """Whether drafting stops before the token at ``position``: its confidence is below tau, or
        the stop rule says stop. Every drafter asks this, with the signals of its own proposal law."""
        return confidence < self.tau or (
            self.stop is not None and bool(self.stop(position, confidence, entropy))
        )


class Outcome(NamedTuple):
    """What one iteration decided for one row, without its time or tokens (the engine reads it
    off its judgement, the trace replay off a trace); fields as :class:`StepResult`'s."""

    k: int
    proposed: int
    accepted: int
    emitted: int
    confidences: list[float]
    entropies: list[float]
    acceptance_probs: list[float]
    stopped_by_tau: bool


@dataclass
class StepResult:
    """What one speculative iteration did for one row (its seconds are the whole step's: the rows
    share the forwards, :class:`Step`).

    Attributes:
        action: the action the controller asked for (its ``drafter`` proposed).
        k: the k actually used (clipped by the context window and remaining budget).
        proposed: m, draft tokens proposed (m <= k; fewer when tau or the stop rule stopped drafting).
        accepted: a, proposed tokens the target accepted (a <= m).
        emitted: tokens appended to the output, a + 1 (fewer if EOS or the budget cut it).
        draft_seconds: device-synchronised time spent drafting (a drafter's catch-up included).
        verify_seconds: device-synchronised time of the target forward, acceptance and rollback.
        confidences: max_v q_i(v) of every drafted position, the one that stopped drafting
            included (m or m + 1 entries).
        entropies: entropy (nats) of q_i at the same positions.
        acceptance_probs: per proposed position, min(1, p_i(x_i) / q_i(x_i)) (greedy: 0 or 1).
        stopped_by_tau: drafting ended before k by tau or the action's stop rule.
        context_length: sequence length (prompt + generated) before the step.
        tokens: the emitted token ids.
        target_logits: (emitted, V) the verify forward's logits at each emitted position, when
            the generation keeps them (``keep_target_logits``), else None.
    """

    action: Action
    k: int
    proposed: int
    accepted: int
    emitted: int
    draft_seconds: float
    verify_seconds: float
    confidences: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)
    acceptance_probs: list[float] = field(default_factory=list)
    stopped_by_tau: bool = False
    context_length: int = 0
    tokens: list[int] = field(default_factory=list)
    target_logits: torch.Tensor | None = field(default=None, repr=False, compare=False)

    @classmethod
    def assemble(
        cls,
        action: Action,
        outcome: Outcome,
        draft_seconds: float,
        verify_seconds: float,
        context_length: int,
        tokens: list[int],
        target_logits: torch.Tensor | None = None,
    ) -> StepResult:
        """The one assembly of a step result: the engine's rows, the trace replay's rows and
        :func:`merge_rows` all build theirs here."""
        return cls(
            action,
            outcome.k,
            outcome.proposed,
            outcome.accepted,
            outcome.emitted,
            draft_seconds,
            verify_seconds,
            outcome.confidences,
            outcome.entropies,
            outcome.acceptance_probs,
            outcome.stopped_by_tau,
            context_length,
            tokens,
            target_logits,
        )

    @property
    def seconds(self) -> float:
        return self.draft_seconds + self.verify_seconds

    @property
    def drafter(self) -> str:
        return self.action.drafter

    @property
    def accepted_mask(self) -> list[bool]:
        """Per proposed position, whether it was accepted: the first ``accepted`` of ``proposed``
        (the rule accepts a prefix; derived, not stored)."""
        return [i < self.accepted for i in range(self.proposed)]

    @property
    def draft_forwards(self) -> int:
        """Draft forwards the step ran: one per drafted position, the tau-stopped one included
        (a model draft's count; other drafters report their positions the same way)."""
        return len(self.confidences)


@dataclass
class Step:
    """One iteration of the engine over its rows: each row's :class:`StepResult` and the step's time.

    Attributes:
        action: the action every row took.
        rows: the rows (indices into the generation's prompts) that took part, in batch order.
        results: their step results, in the same order.
        draft_seconds, verify_seconds: the step's times (shared by the rows).
        finished: rows that left the batch after this step.
        slots: the width of the target cache's grid the step started on.
    """

    action: Action
    rows: list[int]
    results: list[StepResult]
    draft_seconds: float
    verify_seconds: float
    finished: list[int] = field(default_factory=list)
    slots: int = 0

    @property
    def seconds(self) -> float:
        return self.draft_seconds + self.verify_seconds

    @property
    def emitted(self) -> int:
        """Tokens the step emitted, summed over rows."""
        return sum(result.emitted for result in self.results)

    @property
    def batch_size(self) -> int:
        return len(self.rows)

    def merged(self) -> StepResult:
        """The step as one :class:`StepResult`, for a controller's ``observe`` (:func:`merge_rows`)."""
        return merge_rows(self.results)


def merge_rows(results: list[StepResult]) -> StepResult:
    """The rows of one step as one step: counts summed over rows (so accepted / proposed is the
    batch's acceptance), the rows' drafted signals pooled, the step's seconds. A single row is
    its own result."""
    if len(results) == 1:
        return results[0]
    first = results[0]
    pooled = Outcome(
        k=max(result.k for result in results),
        proposed=sum(result.proposed for result in results),
        accepted=sum(result.accepted for result in results),
        emitted=sum(result.emitted for result in results),
        confidences=[c for result in results for c in result.confidences],
        entropies=[h for result in results for h in result.entropies],
        acceptance_probs=[a for result in results for a in result.acceptance_probs],
        stopped_by_tau=any(result.stopped_by_tau for result in results),
    )
    tokens = [t for result in results for t in result.tokens]
    return StepResult.assemble(
        first.action, pooled, first.draft_seconds, first.verify_seconds, first.context_length, tokens
    )


def throughput(tokens: float, seconds: float) -> float:
    """Tokens per second, 0 when no time passed: the one definition every total, table and env uses
    (a throughput over many episodes is their tokens over their seconds, not a mean of rates)."""
    return tokens / seconds if seconds > 0 else 0.0


GENERATION_TOTALS = (
    "new_tokens",
    "steps",
    "prefill_seconds",
    "draft_seconds",
    "verify_seconds",
    "num_draft_tokens",
    "num_accepted_tokens",
    "num_drafts",
)
GENERATION_RATES = (
    "seconds",
    "tokens_per_s",
    "decode_tokens_per_s",
    "acceptance_rate",
    "mean_acceptance_length",
    "tokens_per_step",
)


@dataclass
class GenerationStats:
    """Per-generation totals, or of many added together (:meth:`add`); an env episode's
    :class:`~specrl.envs.EpisodeSummary` extends it. ``tokens_per_s`` counts new tokens over
    prefill + decode time. The draft counts carry vLLM's names and definitions
    (``vllm/v1/spec_decode/metrics.py``); ``steps`` counts target forwards after the prefill."""

    new_tokens: int = 0
    steps: int = 0
    prefill_seconds: float = 0.0
    draft_seconds: float = 0.0
    verify_seconds: float = 0.0
    num_draft_tokens: int = 0
    num_accepted_tokens: int = 0
    num_drafts: int = 0

    def add(self, other: GenerationStats) -> None:
        """Accumulate another generation's totals (throughput over many is total / total)."""
        for name in GENERATION_TOTALS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    @property
    def proposed(self) -> int:
        """``num_draft_tokens``, by the name the per-step results use."""
        return self.num_draft_tokens

    @property
    def accepted(self) -> int:
        """``num_accepted_tokens``, by the name the per-step results use."""
        return self.num_accepted_tokens

    @property
    def decode_seconds(self) -> float:
        return self.draft_seconds + self.verify_seconds

    @property
    def seconds(self) -> float:
        return self.prefill_seconds + self.decode_seconds

    @property
    def tokens_per_s(self) -> float:
        return throughput(self.new_tokens, self.seconds)

    @property
    def decode_tokens_per_s(self) -> float:
        return throughput(self.new_tokens, self.decode_seconds)

    @property
    def acceptance_rate(self) -> float:
        """num_accepted_tokens / num_draft_tokens (0 when nothing was drafted)."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    @property
    def mean_acceptance_length(self) -> float:
        """vLLM's: 1 + num_accepted_tokens / num_drafts, 1 when nothing was drafted."""
        return 1.0 + self.num_accepted_tokens / self.num_drafts if self.num_drafts else 1.0

    @property
    def tokens_per_step(self) -> float:
        """New tokens per target forward after the prefill (plain steps included; cut at EOS)."""
        return self.new_tokens / self.steps if self.steps else 0.0

    def to_dict(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in (*GENERATION_TOTALS, *GENERATION_RATES)}


@dataclass
class GenerationOutput:
    text: str
    token_ids: list[int]  # new tokens only
    prompt_ids: list[int]
    stats: GenerationStats
    steps: list[StepResult]
    # (new tokens, V): the target's logits at every generated position, with keep_target_logits
    target_logits: torch.Tensor | None = field(default=None, repr=False, compare=False)
