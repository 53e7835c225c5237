"""One generation in progress: the sequence, both caches, the budget, stepped by actions."""

from __future__ import annotations

import torch

from specrl.engine.cache import KVCache, new_cache
from specrl.engine.drafters.base import Drafter
from specrl.engine.drafters.ngram import NGramDrafter
from specrl.engine.drafters.pool import DrafterPool
from specrl.engine.sampling import SamplingConfig
from specrl.engine.step import speculative_step
from specrl.engine.timing import DeviceClock
from specrl.engine.types import DEFAULT_DRAFTER, LOOKUP_DRAFTER, Action, GenerationStats, StepResult
from specrl.models import ModelPair


class PromptTooLongError(ValueError):
    """The prompt leaves no room in the models' context window."""


class Generation:
    """A single sequence being decoded speculatively; ``step(action)`` runs one iteration.

    The prompt is prefilled into the target's cache and the default draft's at construction
    (timed separately). Every other drafter an action names (:mod:`specrl.engine.drafters`) is
    built on first use, with its own state, and catches up on the sequence then, within that
    step's drafting time. The
    generation is done after ``max_new_tokens`` tokens, an EOS (when ``stop_at_eos``), or
    when the context window is full. With ``keep_target_logits`` every step also returns the
    target's logits at the positions it emitted (:attr:`StepResult.target_logits`).
    """

    def __init__(
        self,
        pair: ModelPair,
        prompt_ids: list[int],
        max_new_tokens: int,
        sampling: SamplingConfig,
        seed: int = 0,
        stop_at_eos: bool = True,
        keep_target_logits: bool = False,
    ) -> None:
        if not prompt_ids:
            raise ValueError("the prompt is empty: give at least one token of text to continue")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if len(prompt_ids) >= pair.context_length:
            raise PromptTooLongError(
                f"the prompt has {len(prompt_ids)} tokens but the models' context window is "
                f"{pair.context_length}; shorten the prompt to at most "
                f"{pair.context_length - 1} tokens"
            )
        self.pair = pair
        self.sampling = sampling
        self.max_new_tokens = max_new_tokens
        self.eos_token_id = pair.eos_token_id if stop_at_eos else None
        self.keep_target_logits = keep_target_logits
        self.clock = DeviceClock(pair.device)
        self.generator = torch.Generator(device=pair.device).manual_seed(seed)
        self.tokens = torch.tensor([prompt_ids], dtype=torch.long, device=pair.device)  # (B, L)
        self.prompt_length = len(prompt_ids)
        self.target = new_cache(pair.target, pair.vocab_size, pair.cache, pair.context_length)
        self.pool = DrafterPool(pair)
        self.drafters: dict[str, Drafter] = {}
        self.steps: list[StepResult] = []
        self.finished_by_eos = False

        start = self.clock.now()
        draft = self.drafter(DEFAULT_DRAFTER)
        if self.prompt_length > 1:  # both caches hold everything but the last token
            self.target.feed(self.tokens[:, :-1])
            draft.prefill(self.tokens)
        self.prefill_seconds = self.clock.now() - start

    def drafter(self, name: str) -> Drafter:
        """This generation's drafter ``name``, built from the pair's pool on first use."""
        if name not in self.drafters:
            self.drafters[name] = self.pool.new(name)
        return self.drafters[name]

    def lookup_match(self) -> tuple[int, int]:
        """What the n-gram lookup finds now: (tokens it could propose, the order of its match),
        (0, 0) without a match (the ``lookup_available`` and ``lookup_order`` features)."""
        lookup = self.drafter(LOOKUP_DRAFTER)  # the n-gram drafter's own index: it proposes from this search
        assert isinstance(lookup, NGramDrafter)
        match = lookup.longest_match(self.tokens[0])
        return (0, 0) if match is None else (self.tokens.shape[1] - match[1], match[0])

    def caches(self) -> list[KVCache]:
        """Every KV cache of the generation: the target's, then each drafter's."""
        return [self.target, *(cache for drafter in self.drafters.values() for cache in drafter.caches())]

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def new_tokens(self) -> int:
        return self.tokens.shape[1] - self.prompt_length

    @property
    def remaining(self) -> int:
        """Tokens still allowed by the budget and the context window."""
        by_budget = self.max_new_tokens - self.new_tokens
        by_context = self.pair.context_length - self.tokens.shape[1]
        return max(0, min(by_budget, by_context))

    @property
    def done(self) -> bool:
        return self.finished_by_eos or self.remaining == 0

    def step(self, action: Action) -> StepResult:
        """One speculative iteration with ``action``; appends what it emitted."""
        if self.done:
            raise RuntimeError("the generation is finished; start a new one")
        # A step emits up to k + 1 tokens and verifies k + 1 positions: never draft past
        # the budget or the context window.
        k = min(action.k, self.remaining - 1)
        drafter = self.drafter(action.drafter)
        result = speculative_step(
            self.tokens, self.target, drafter, action, k, self.sampling, self.generator, self.clock,
            self.keep_target_logits,
        )  # fmt: skip
        emitted = result.tokens
        if self.eos_token_id is not None and self.eos_token_id in emitted:
            emitted = emitted[: emitted.index(self.eos_token_id) + 1]
            self.finished_by_eos = True
            if result.target_logits is not None:
                result.target_logits = result.target_logits[: len(emitted)]
        result.tokens, result.emitted = emitted, len(emitted)
        new = torch.tensor([emitted], dtype=torch.long, device=self.tokens.device)
        self.tokens = torch.cat([self.tokens, new], 1)
        if len(emitted) < result.accepted + 1:
            # EOS cut the step short: keep the caches a strict prefix of the sequence.
            self.target.rollback(self.tokens.shape[1] - 1)
            drafter.rollback(self.tokens.shape[1] - 1)
        self.steps.append(result)
        return result

    def target_logits(self) -> torch.Tensor | None:
        """(new tokens, V): the target's logits at every generated position, when kept."""
        if not self.keep_target_logits:
            return None
        rows = [step.target_logits for step in self.steps]
        return torch.cat(rows) if rows else torch.empty((0, self.pair.vocab_size), device=self.tokens.device)

    @property
    def output_ids(self) -> list[int]:
        return self.tokens[0, self.prompt_length :].tolist()

    def stats(self) -> GenerationStats:
        return GenerationStats(
            new_tokens=self.new_tokens,
            steps=len(self.steps),
            prefill_seconds=self.prefill_seconds,
            draft_seconds=sum(s.draft_seconds for s in self.steps),
            verify_seconds=sum(s.verify_seconds for s in self.steps),
            proposed=sum(s.proposed for s in self.steps),
            accepted=sum(s.accepted for s in self.steps),
        )
