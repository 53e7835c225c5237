"""Generations in progress: B sequences decoded together, one action per step; a single
sequence is a batch of one.

Each step (:func:`specrl.engine.step.speculative_step`) drafts for every row with the action's
drafter, verifies every row in one target forward, accepts each row's own tokens losslessly and
rolls each cache back to each row's accepted prefix. Rows that finish leave the batch; prompts
may join between steps (:meth:`Generation.add`: continuous batching). Each row's output is
distributed as the target's alone.
"""

from __future__ import annotations

import torch

from specrl.engine.cache import COMPACT_AT, KVCache
from specrl.engine.drafters.base import Drafter
from specrl.engine.drafters.ngram import NGramDrafter
from specrl.engine.drafters.registry import DrafterPool
from specrl.engine.memory import check_batch_memory
from specrl.engine.sampling import SamplingConfig
from specrl.engine.step import speculative_step
from specrl.engine.timing import DeviceClock
from specrl.engine.types import DEFAULT_DRAFTER, Action, GenerationStats, Step, StepResult
from specrl.features import LOOKUP_DRAFTER
from specrl.models import ModelPair


class PromptTooLongError(ValueError):
    """The prompt leaves no room in the models' context window."""


class Generation:
    """B prompts decoded together (see the module doc): ``step(action)`` for every active row,
    ``done`` once every row finished, ``output_ids(r)`` row r's generated tokens. The prompts are
    prefilled at construction (timed: ``prefill_seconds``); a drafter other than the draft is
    built on first use and catches up on the rows within that step's drafting time.
    ``keep_target_logits``: each step also returns the target's logits at what it emitted."""

    def __init__(
        self,
        pair: ModelPair,
        prompts: list[list[int]],
        max_new_tokens: int,
        sampling: SamplingConfig,
        seed: int = 0,
        stop_at_eos: bool = True,
        keep_target_logits: bool = False,
    ) -> None:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        self.pair, self.sampling, self.max_new_tokens = pair, sampling, max_new_tokens
        self.eos_token_id = pair.eos_token_id if stop_at_eos else None
        self.keep_target_logits = keep_target_logits
        self.clock = DeviceClock(pair.device)
        self.generator = torch.Generator(device=pair.device).manual_seed(seed)
        self.tokens: list[list[int]] = []  # every row's whole sequence
        self.prompt_lengths: list[int] = []
        self.budgets: list[int] = []  # every row's max_new_tokens
        self.finished_by_eos: list[bool] = []
        self.active: list[int] = []  # rows in the batch, in cache order
        self.steps: list[Step] = []
        self.prefill_seconds = 0.0
        self.target = KVCache(pair.target, pair.vocab_size, pair.cache, pair.context_length, rows=0)
        self.pool = DrafterPool(pair)
        self.drafters: dict[str, Drafter] = {DEFAULT_DRAFTER: self.pool.new(DEFAULT_DRAFTER)}
        self.add(prompts)

    def add(self, prompts: list[list[int]], max_new_tokens: int | None = None) -> list[int]:
        """Admit ``prompts`` into the batch, also while it runs (continuous batching); return
        their row indices. Their prompts are prefilled apart, then their caches join the batch's
        (:meth:`KVCache.admit`); the time it takes counts in ``prefill_seconds``. Each new row
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
        if not self.active and self.target.rows:  # the last rows finished (their caches stayed): a new batch
            self.target.select([])
            for drafter in self.drafters.values():
                drafter.select([])
        prompts = [list(prompt) for prompt in prompts]
        self.target.admit([prompt[:-1] for prompt in prompts])  # the caches hold all but the last token
        for drafter in self.drafters.values():
            drafter.admit(prompts)
        self.prefill_seconds += self.clock.now() - start
        rows = list(range(len(self.tokens), len(self.tokens) + len(prompts)))
        self.tokens += prompts
        self.prompt_lengths += [len(prompt) for prompt in prompts]
        self.budgets += [budget] * len(prompts)
        self.finished_by_eos += [False] * len(prompts)
        self.active += rows
        return rows

    def drafter(self, name: str) -> Drafter:
        """This generation's drafter ``name``, built from the pair's pool on first use (its rows
        empty: it catches up on their sequences when it first proposes)."""
        if name not in self.drafters:
            self.drafters[name] = self.pool.new(name, rows=len(self.active))
        return self.drafters[name]

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

    def lookup_match(self) -> tuple[float, float]:
        """What the n-gram lookup finds now, as a mean over the active rows: (tokens it could
        propose, the order of its match), (0, 0) without a match (the ``lookup_available`` and
        ``lookup_order`` features)."""
        if not self.active:
            return 0.0, 0.0
        lookup = self.drafter(LOOKUP_DRAFTER)  # the n-gram drafter's own index: it proposes from this search
        assert isinstance(lookup, NGramDrafter)
        rows = zip(lookup.indices, self.active, strict=True)
        found = [index.found(self.tokens[row]) for index, row in rows]
        return sum(f[0] for f in found) / len(found), sum(f[1] for f in found) / len(found)

    def caches(self) -> list[KVCache]:
        """Every KV cache of the generation: the target's, then each drafter's."""
        return [self.target, *(cache for drafter in self.drafters.values() for cache in drafter.caches())]

    def row_steps(self, row: int) -> list[StepResult]:
        """Row ``row``'s result of every step it took part in."""
        return [step.results[step.rows.index(row)] for step in self.steps if row in step.rows]

    def row_stats(self, row: int) -> GenerationStats:
        """Row ``row``'s totals: the seconds of the steps it took part in (its latency), its own
        tokens and draft counts."""
        steps = [step for step in self.steps if row in step.rows]
        return _totals(steps, self.row_steps(row), len(self.output_ids(row)), self.prefill_seconds)

    def stats(self) -> GenerationStats:
        """The batch's totals: every row's tokens over the batch's time (its throughput); a draft
        is a row's step that drafted (vLLM counts one per request and step)."""
        results = [result for step in self.steps for result in step.results]
        new_tokens = sum(len(self.output_ids(r)) for r in range(len(self.tokens)))
        return _totals(self.steps, results, new_tokens, self.prefill_seconds)

    def target_logits(self, row: int) -> torch.Tensor | None:
        """(new tokens, V): the target's logits at every position row ``row`` generated, when kept."""
        if not self.keep_target_logits:
            return None
        logits = [result.target_logits for result in self.row_steps(row)]
        if not logits:
            return torch.empty((0, self.pair.vocab_size), device=self.pair.device)
        return torch.cat(logits)

    # ---- one step -----------------------------------------------------------------------------

    def step(self, action: Action) -> Step:
        """One speculative iteration of every active row with ``action``."""
        if self.done:
            raise RuntimeError("every row is finished; start a new generation")
        rows, slots = list(self.active), self.target.slots
        # A step emits up to k + 1 tokens and verifies k + 1 positions: never draft past a row's
        # budget or the context window.
        ks = [min(action.k, self.remaining(r) - 1) for r in rows]
        drafter = self.drafter(action.drafter)
        step = speculative_step(
            [self.tokens[r] for r in rows], ks, self.target, drafter, action, self.sampling, self.generator,
            self.clock, self.eos_token_id, self.keep_target_logits,
        )  # fmt: skip
        step.rows, step.slots = rows, slots
        step.finished = self._append(rows, step.results)
        self.steps.append(step)
        return step

    def finish(self, rows: list[int]) -> None:
        """End ``rows`` now, where a stop rule outside the engine says so (a stop string, say):
        they emit nothing more and leave the batch, as rows at their budget do."""
        for r in rows:
            self.budgets[r] = len(self.tokens[r]) - self.prompt_lengths[r]
        self._leave([r for r in rows if r in self.active])

    def _append(self, rows: list[int], results: list[StepResult]) -> list[int]:
        """Append each row's emitted tokens; remove finished rows from the batch and its caches."""
        finished = []
        for r, result in zip(rows, results, strict=True):
            self.tokens[r].extend(result.tokens)
            if self.eos_token_id is not None and result.tokens[-1] == self.eos_token_id:
                self.finished_by_eos[r] = True
            if self.row_done(r):
                finished.append(r)
        self._leave(finished)
        return finished

    def _leave(self, finished: list[int]) -> None:
        """Remove ``finished`` rows from the batch and its caches (the last rows to finish keep
        theirs until prompts start a new batch), then pack the caches if holes crowd them."""
        rows = self.active
        if finished and len(finished) < len(rows):
            keep = [i for i, r in enumerate(rows) if r not in finished]
            self.active = [rows[i] for i in keep]
            self.target.select(keep)
            for drafter in self.drafters.values():
                drafter.select(keep)
        elif finished:
            self.active = []
        for cache in self.caches():
            cache.compact(COMPACT_AT)


def _totals(steps: list[Step], results: list[StepResult], new_tokens: int, prefill: float) -> GenerationStats:
    """The totals of ``steps`` (their seconds) and ``results`` (their draft counts)."""
    return GenerationStats(
        new_tokens=new_tokens,
        steps=len(steps),
        prefill_seconds=prefill,
        draft_seconds=sum(step.draft_seconds for step in steps),
        verify_seconds=sum(step.verify_seconds for step in steps),
        num_draft_tokens=sum(result.proposed for result in results),
        num_accepted_tokens=sum(result.accepted for result in results),
        num_drafts=sum(result.proposed > 0 for result in results),
    )
