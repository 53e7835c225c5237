"""Batched speculative decoding: B sequences, one action per step, ragged acceptance.

Serving engines (vLLM, TensorRT-LLM) decode many requests together and speculate with the same k
for every row. Here one :class:`BatchGeneration` holds B rows; each step:

1. **Draft** with the draft model, all rows in lockstep: a catch-up forward over the tokens each
   row's draft cache has not seen (right-padded), then one forward per further proposal. A row
   stops proposing at its own tau cut or stop rule, or at its room; its later columns are
   padding. Drafting ends when every row has stopped.
2. **Verify** every row's last token and proposals in one target forward (right-padded).
3. **Accept** row by row with the lossless rule (:func:`specrl.engine.rejection.judge`): each row
   keeps its own accepted length a_r and gets its correction or bonus token.
4. **Roll back** each cache to each row's own accepted prefix (:class:`BatchCache`: the rejected
   slots become holes; nothing is recomputed and no row is cut to another's length).

Rows that finish (EOS, their budget, the context window) leave the batch, and new prompts may join
it between steps (:meth:`BatchGeneration.add`: continuous batching; their prefill runs apart and
their caches join the batch's). Each row's output is
distributed as the target's alone; greedy rows equal plain greedy decoding of that prompt.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specrl.engine.batch_cache import BatchCache
from specrl.engine.generation import PromptTooLongError
from specrl.engine.rejection import judge, read_outcomes
from specrl.engine.sampling import SamplingConfig
from specrl.engine.signals import DraftSignals
from specrl.engine.timing import DeviceClock
from specrl.engine.types import DEFAULT_DRAFTER, Action, GenerationStats, StepResult
from specrl.models import ModelPair

COMPACT_AT = 0.5  # pack the caches when holes take more than this share of their slots


class BatchTooLargeError(ValueError):
    """The batch's KV caches would not fit in the device's free memory."""


def kv_bytes_per_token(model: torch.nn.Module) -> int:
    """Bytes one token takes in a model's KV cache (keys and values of every layer)."""
    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dtype = next(model.parameters()).dtype
    return 2 * config.num_hidden_layers * heads * head_dim * dtype.itemsize


def free_bytes(device: torch.device) -> int | None:
    """Free memory on ``device`` (None where it cannot be told)."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def check_batch_memory(pair: ModelPair, rows: int, tokens_per_row: int) -> None:
    """Refuse a batch whose KV caches (target and draft, holes up to ``COMPACT_AT`` included)
    would not fit in free memory, saying how many rows would."""
    per_row = int(tokens_per_row / (1 - COMPACT_AT)) * (
        kv_bytes_per_token(pair.target) + kv_bytes_per_token(pair.draft)
    )
    free = free_bytes(pair.device)
    if free is None or rows * per_row <= free:
        return
    raise BatchTooLargeError(
        f"a batch of {rows} prompts needs about {rows * per_row / 2**30:.1f} GiB of KV cache "
        f"({tokens_per_row} tokens a row, room for rejected slots included) but {pair.device} has "
        f"{free / 2**30:.1f} GiB free: at most {free // per_row} rows fit; decode in smaller batches"
    )


@dataclass
class BatchStepResult:
    """One batched iteration: each active row's :class:`StepResult` and the batch's time.

    Attributes:
        rows: the rows (indices into the prompts) that took part, in batch order.
        results: their step results; each row's ``draft_seconds`` and ``verify_seconds`` are the
            whole batch's (the rows share the forwards).
        draft_seconds, verify_seconds: device-synchronised time of the batch's drafting and of its
            verification, acceptance and rollback.
    """

    action: Action
    rows: list[int]
    results: list[StepResult]
    draft_seconds: float
    verify_seconds: float
    finished: list[int] = field(default_factory=list)  # rows that left the batch after this step
    slots: int = 0  # the width of the target cache's grid the step started on (holes included)

    @property
    def seconds(self) -> float:
        return self.draft_seconds + self.verify_seconds

    @property
    def emitted(self) -> int:
        """Tokens the batch emitted, summed over rows."""
        return sum(result.emitted for result in self.results)

    @property
    def batch_size(self) -> int:
        return len(self.rows)

    def merged(self) -> StepResult:
        """The batch as one step, for a controller's ``observe`` (:func:`merge_rows`)."""
        return merge_rows(self.results)


def merge_rows(results: list[StepResult]) -> StepResult:
    """The rows of one batched step as one step: counts summed over rows (so accepted / proposed
    is the batch's acceptance), the rows' drafted signals pooled, the batch's seconds."""
    first = results[0]
    return StepResult(
        action=first.action,
        k=max(result.k for result in results),
        proposed=sum(result.proposed for result in results),
        accepted=sum(result.accepted for result in results),
        emitted=sum(result.emitted for result in results),
        draft_seconds=first.draft_seconds,
        verify_seconds=first.verify_seconds,
        confidences=[c for result in results for c in result.confidences],
        entropies=[h for result in results for h in result.entropies],
        accepted_mask=[a for result in results for a in result.accepted_mask],
        acceptance_probs=[a for result in results for a in result.acceptance_probs],
        stopped_by_tau=any(result.stopped_by_tau for result in results),
        context_length=first.context_length,
        tokens=[t for result in results for t in result.tokens],
    )


class BatchGeneration:
    """B prompts decoded together with the target and the draft (see the module doc).

    ``step(action)`` runs one iteration for every row still active; ``done`` once every row has
    finished; ``output_ids(r)`` is row r's generated text.
    """

    def __init__(
        self,
        pair: ModelPair,
        prompts: list[list[int]],
        max_new_tokens: int,
        sampling: SamplingConfig,
        seed: int = 0,
        stop_at_eos: bool = True,
    ) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.pair, self.sampling, self.max_new_tokens = pair, sampling, max_new_tokens
        self.eos_token_id = pair.eos_token_id if stop_at_eos else None
        self.clock = DeviceClock(pair.device)
        self.generator = torch.Generator(device=pair.device).manual_seed(seed)
        self.tokens: list[list[int]] = []  # every row's whole sequence
        self.prompt_lengths: list[int] = []
        self.budgets: list[int] = []  # every row's max_new_tokens
        self.finished_by_eos: list[bool] = []
        self.active: list[int] = []  # rows in the batch, in cache order
        self.steps: list[BatchStepResult] = []
        self.prefill_seconds = 0.0
        self.target = self.draft = None
        self.add(prompts)

    def add(self, prompts: list[list[int]], max_new_tokens: int | None = None) -> list[int]:
        """Admit ``prompts`` into the batch, also while it runs (continuous batching); return
        their row indices. Their prompts are prefilled apart, then their caches join the batch's
        (:meth:`BatchCache.join`); the time it takes counts in ``prefill_seconds``. Each new row
        may emit ``max_new_tokens`` (default: the generation's)."""
        if not prompts:
            raise ValueError("the list of prompts is empty: give at least one prompt to decode")
        budget = self.max_new_tokens if max_new_tokens is None else max_new_tokens
        if budget < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {budget}")
        context = self.pair.context_length
        for r, prompt in enumerate(prompts):
            if not prompt:
                raise ValueError(f"prompt {r} is empty: give at least one token of text to continue")
            if len(prompt) >= context:
                raise PromptTooLongError(
                    f"prompt {r} has {len(prompt)} tokens but the models' context window is "
                    f"{context}; shorten it to at most {context - 1} tokens"
                )
        longest = max(
            [min(context, len(prompt) + budget) for prompt in prompts]
            + [min(context, self.prompt_lengths[r] + self.budgets[r]) for r in self.active]
        )
        check_batch_memory(self.pair, len(self.active) + len(prompts), longest)
        start = self.clock.now()
        target = BatchCache(self.pair.target, self.pair.vocab_size, len(prompts))
        draft = BatchCache(self.pair.draft, self.pair.vocab_size, len(prompts))
        prefix = [list(prompt[:-1]) for prompt in prompts]  # the caches hold all but the last token
        if any(prefix):
            ids, valid = self._padded(prefix)
            target.feed(ids, valid, keep=1)
            draft.feed(ids, valid, keep=1)
        if self.active:
            self.target.join(target)
            self.draft.join(draft)
        else:  # a new batch, or one whose rows have all left
            self.target, self.draft = target, draft
        self.prefill_seconds += self.clock.now() - start
        rows = list(range(len(self.tokens), len(self.tokens) + len(prompts)))
        self.tokens += [list(prompt) for prompt in prompts]
        self.prompt_lengths += [len(prompt) for prompt in prompts]
        self.budgets += [budget] * len(prompts)
        self.finished_by_eos += [False] * len(prompts)
        self.active += rows
        return rows

    # ---- state --------------------------------------------------------------------------------

    def remaining(self, row: int) -> int:
        """Tokens row ``row`` may still emit: its budget and the context window."""
        by_budget = self.budgets[row] - (len(self.tokens[row]) - self.prompt_lengths[row])
        return max(0, min(by_budget, self.pair.context_length - len(self.tokens[row])))

    def row_done(self, row: int) -> bool:
        return self.finished_by_eos[row] or self.remaining(row) == 0

    @property
    def done(self) -> bool:
        return not self.active

    @property
    def batch_size(self) -> int:
        return len(self.active)

    def output_ids(self, row: int) -> list[int]:
        return self.tokens[row][self.prompt_lengths[row] :]

    def row_steps(self, row: int) -> list[StepResult]:
        """Row ``row``'s result of every batched step it took part in."""
        return [step.results[step.rows.index(row)] for step in self.steps if row in step.rows]

    def row_stats(self, row: int) -> GenerationStats:
        """Row ``row``'s totals; its seconds are those of the batched steps it took part in (its
        latency), its tokens and draft counts its own."""
        steps = [step for step in self.steps if row in step.rows]
        mine = self.row_steps(row)
        return GenerationStats(
            new_tokens=len(self.output_ids(row)),
            steps=len(steps),
            prefill_seconds=self.prefill_seconds,
            draft_seconds=sum(step.draft_seconds for step in steps),
            verify_seconds=sum(step.verify_seconds for step in steps),
            proposed=sum(result.proposed for result in mine),
            accepted=sum(result.accepted for result in mine),
        )

    def stats(self) -> GenerationStats:
        """The batch's totals: every row's tokens over the batch's time (its throughput)."""
        return GenerationStats(
            new_tokens=sum(len(self.output_ids(r)) for r in range(len(self.tokens))),
            steps=len(self.steps),
            prefill_seconds=self.prefill_seconds,
            draft_seconds=sum(step.draft_seconds for step in self.steps),
            verify_seconds=sum(step.verify_seconds for step in self.steps),
            proposed=sum(result.proposed for step in self.steps for result in step.results),
            accepted=sum(result.accepted for step in self.steps for result in step.results),
        )

    # ---- one step -----------------------------------------------------------------------------

    def step(self, action: Action) -> BatchStepResult:
        """One speculative iteration of every active row with ``action``."""
        if self.done:
            raise RuntimeError("every row is finished; start a new generation")
        if action.drafter != DEFAULT_DRAFTER:
            raise NotImplementedError(
                f"batched decoding drafts with the draft model only, not {action.drafter!r} yet; "
                "decode one prompt at a time to use the drafter pool"
            )
        rows, slots = list(self.active), self.target.slots
        lengths = [len(self.tokens[r]) for r in rows]
        ks = [min(action.k, self.remaining(r) - 1) for r in rows]  # never past a row's room
        start = self.clock.now()
        drafts = self._draft(rows, ks, action)
        drafted_at = self.clock.now()

        ids, valid = self._padded([[self.tokens[r][-1]] for r in rows])
        if drafts.columns is not None:  # every row's last token, then its proposals (holes after them)
            ids, valid = torch.cat([ids, drafts.columns], 1), torch.cat([valid, drafts.valid], 1)
        p = self.sampling.probs(self.target.feed(ids, valid))  # (B, 1 + m_max, V)
        proposals = [ids[i : i + 1, 1 : 1 + m] for i, m in enumerate(drafts.proposed)]
        judgements = [  # row by row: each row's random draws in order
            judge(x, drafts.law(i, p), p[i : i + 1, : x.shape[1] + 1], self.sampling, self.generator)
            for i, x in enumerate(proposals)
        ]
        results = []
        for i, (a, next_token, drafted, acceptance_probs) in enumerate(read_outcomes(judgements, proposals)):
            m = drafts.proposed[i]
            emitted = drafted[:a] + [next_token]
            results.append(
                StepResult(
                    action=action,
                    k=ks[i],
                    proposed=m,
                    accepted=a,
                    emitted=len(emitted),
                    draft_seconds=0.0,
                    verify_seconds=0.0,
                    confidences=drafts.confidences[i],
                    entropies=drafts.entropies[i],
                    accepted_mask=[j < a for j in range(m)],
                    acceptance_probs=acceptance_probs,
                    stopped_by_tau=drafts.stopped[i],
                    context_length=lengths[i],
                    tokens=emitted,
                )
            )
        finished = self._append(rows, results)  # appends, then cuts the caches to each row's prefix
        verified_at = self.clock.now()

        for result in results:
            result.draft_seconds, result.verify_seconds = drafted_at - start, verified_at - drafted_at
        step = BatchStepResult(
            action, rows, results, drafted_at - start, verified_at - drafted_at, finished, slots
        )
        self.steps.append(step)
        return step

    def _draft(self, rows: list[int], ks: list[int], action: Action) -> _Drafts:
        """Every row's proposals (on the device), the law each was drawn from, and the draft's
        signals: read to the host per position only when the action's cut needs them."""
        n = len(rows)
        drafts = _Drafts(n)
        drafting = [k > 0 for k in ks]
        if not any(drafting):
            return drafts
        signals = DraftSignals(action, n)
        columns, laws = [], []  # (B,) tokens and (B, V) laws, one per position
        looked = [0] * n  # positions each row looked at (the one its cut stopped before included)
        seen = self.draft.lengths.tolist()
        ids, valid = self._padded([self.tokens[r][seen[i] :] for i, r in enumerate(rows)])  # >= 1 each
        for position in range(max(ks)):
            logits = self.draft.feed(ids, valid)  # (B, width, V)
            last = valid.long().sum(1) - 1  # each row's last real column
            q = self.sampling.probs(logits[torch.arange(n), last])  # (B, V)
            halts = signals.halts(position, q)
            columns.append(self.sampling.choose(q, self.generator))
            laws.append(q)
            for i in range(n):
                if not drafting[i]:
                    continue
                looked[i] += 1
                if halts[i]:
                    drafting[i], drafts.stopped[i] = False, True
                    continue
                drafts.proposed[i] += 1
                # the last proposal is not fed: only its law is needed
                drafting[i] = drafts.proposed[i] < ks[i]
            if not any(drafting):
                break  # rows that stopped are fed holes until then
            ids, valid = columns[-1][:, None], self._on_device([[d] for d in drafting], torch.bool)
        width = max(drafts.proposed)
        drafts.columns = torch.stack(columns, 1)[:, :width]  # a row's proposals are its first columns
        drafts.laws = torch.stack(laws, 1)[:, :width]
        drafts.valid = self._on_device([[j < m for j in range(width)] for m in drafts.proposed], torch.bool)
        confidences, entropies = signals.read()
        drafts.confidences = [c[: looked[i]] for i, c in enumerate(confidences)]
        drafts.entropies = [h[: looked[i]] for i, h in enumerate(entropies)]
        return drafts

    def _append(self, rows: list[int], results: list[StepResult]) -> list[int]:
        """Append each row's emitted tokens (cut at EOS); remove finished rows from the batch."""
        finished = []
        for r, result in zip(rows, results, strict=True):
            emitted = result.tokens
            if self.eos_token_id is not None and self.eos_token_id in emitted:
                emitted = emitted[: emitted.index(self.eos_token_id) + 1]
                self.finished_by_eos[r] = True
            result.tokens, result.emitted = emitted, len(emitted)
            self.tokens[r].extend(emitted)
            if self.row_done(r):
                finished.append(r)
        # each row's accepted prefix (an EOS may have cut it short); the emitted token is not fed yet
        lengths = torch.tensor([len(self.tokens[r]) - 1 for r in rows], device=self.target.mask.device)
        self.target.rollback(lengths)
        self.draft.rollback(lengths)
        if finished:
            keep = [i for i, r in enumerate(rows) if r not in finished]
            self.active = [rows[i] for i in keep]
            if keep:
                index = torch.tensor(keep, device=self.target.mask.device)
                self.target.select(index)
                self.draft.select(index)
        for cache in (self.target, self.draft):
            cache.compact(COMPACT_AT)
        return finished

    def _padded(self, rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Right-padded (B, width) token ids and the mask of real tokens, on the device."""
        width = max(1, max(len(row) for row in rows))
        ids = [row + [0] * (width - len(row)) for row in rows]
        valid = [[j < len(row) for j in range(width)] for row in rows]
        return self._on_device(ids, torch.long), self._on_device(valid, torch.bool)

    def _on_device(self, values: list[list], dtype: torch.dtype) -> torch.Tensor:
        """A host table copied to the device without waiting for it (pinned, non-blocking on CUDA)."""
        table = torch.tensor(values, dtype=dtype)
        if self.pair.device.type != "cuda":
            return table
        return table.pin_memory().to(self.pair.device, non_blocking=True)


@dataclass
class _Drafts:
    """One batched step's drafting, row by row (see :meth:`BatchGeneration._draft`)."""

    rows: int
    proposed: list[int] = field(default_factory=list)  # m per row
    stopped: list[bool] = field(default_factory=list)  # a tau cut or the stop rule ended the row's drafting
    confidences: list[list[float]] = field(default_factory=list)
    entropies: list[list[float]] = field(default_factory=list)
    columns: torch.Tensor | None = None  # (B, m_max) proposals, left-aligned; None: nothing drafted
    valid: torch.Tensor | None = None  # (B, m_max) which columns are a row's proposals
    laws: torch.Tensor | None = None  # (B, m_max, V)

    def __post_init__(self) -> None:
        self.proposed = [0] * self.rows
        self.stopped = [False] * self.rows
        self.confidences = [[] for _ in range(self.rows)]
        self.entropies = [[] for _ in range(self.rows)]

    def law(self, row: int, p: torch.Tensor) -> torch.Tensor:
        """(1, m, V): the laws of ``row``'s proposals (empty, shaped like ``p``, when none)."""
        if self.laws is None:
            return p[row : row + 1, :0]
        return self.laws[row : row + 1, : self.proposed[row]]
