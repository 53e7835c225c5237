"""``SpeculativeDecoder``: whole generations, with a controller choosing (k, tau) each step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from specrl.engine.generation import Generation
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import DEFAULT_DRAFTER, GenerationOutput, GenerationStats, Step
from specrl.features import FeatureTracker, GenerationSettings, Prices
from specrl.models import ModelPair

if TYPE_CHECKING:  # controllers depend on the engine, not the other way round
    from specrl.controllers.base import Controller


class SpeculativeDecoder:
    """Lossless speculative decoding of a (target, draft) pair: the controller picks each step's
    :class:`Action` from the observation of :mod:`specrl.features` (the envs' own) and is told the
    :class:`StepResult`. The output is distributed as sampling from the target alone.

    Example::

        pair = specrl.load_pair()
        decoder = specrl.SpeculativeDecoder(pair, controller=specrl.StaticController(4, 0.0))
        out = decoder.generate("def fib(n):", max_new_tokens=64)
        print(out.text, out.stats.tokens_per_s)

    ``prices``: the price features' prior, a latency model's ``price_line``; default this
    machine's cached calibrations of the pair (:func:`default_prices`).
    """

    def __init__(self, pair: ModelPair, controller: Controller, prices: Prices | None = None) -> None:
        self.pair = pair
        self.controller = controller
        self.prices = prices

    def start(
        self,
        prompt: str | list[int] | Sequence[str | list[int]],
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop_at_eos: bool = True,
        keep_target_logits: bool = False,
    ) -> Generation:
        """Tokenize, prefill, and return the generation ready to be stepped: one prompt (a string
        or token ids) is a batch of one; a list of them is a batch."""
        prompts = [prompt] if _is_one_prompt(prompt) else list(prompt)
        ids = [self.pair.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        if len(ids) == 1 and not ids[0]:
            raise ValueError("the prompt is empty: give at least one token of text to continue")
        sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
        return Generation(self.pair, ids, max_new_tokens, sampling, seed, stop_at_eos, keep_target_logits)

    def generate(
        self, prompt: str | list[int] | Sequence[str | list[int]], max_new_tokens: int = 64, **options
    ) -> GenerationOutput | BatchOutputs:
        """Decode one prompt (a string or token ids: a :class:`GenerationOutput`) or a list of
        them together (a :class:`BatchOutputs`, ``stats`` the batch's totals) to the end.
        ``options``: temperature, top_k, top_p, seed, stop_at_eos, keep_target_logits (each
        output then carries the target's logits at every generated position)."""
        if isinstance(prompt, (list, tuple)) and not prompt:
            raise ValueError(
                "the prompt is empty: an empty list holds no token ids and no prompts; give at least one "
                "token of text to continue, or a list of prompts to decode together"
            )
        if _is_one_prompt(prompt):
            return self.generate_batch([prompt], max_new_tokens, **options)[0]
        return self.generate_batch(prompt, max_new_tokens, **options)

    def generate_batch(
        self, prompts: Sequence[str | list[int]], max_new_tokens: int = 64, **options
    ) -> BatchOutputs:
        """Decode ``prompts`` together (see :meth:`generate`); one output per prompt."""
        generation = self.start(list(prompts), max_new_tokens, **options)
        drive(generation, self.controller, prices=self.prices)
        outputs = BatchOutputs(
            GenerationOutput(
                text=self.pair.tokenizer.decode(generation.output_ids(r)),
                token_ids=generation.output_ids(r),
                prompt_ids=generation.tokens[r][: generation.prompt_lengths[r]],
                stats=generation.row_stats(r),
                steps=generation.row_steps(r),
                target_logits=generation.target_logits(r),
            )
            for r in range(len(generation.tokens))
        )
        outputs.stats = generation.stats()
        return outputs


def _is_one_prompt(prompt) -> bool:
    return isinstance(prompt, str) or (
        isinstance(prompt, (list, tuple)) and bool(prompt) and isinstance(prompt[0], int)
    )


class BatchOutputs(list):
    """One :class:`GenerationOutput` per prompt of a batch; ``stats`` holds the batch's totals."""

    stats: GenerationStats


class ControlLoop:
    """The one controller loop (the decoder, :mod:`specrl.hf`, continuous batching): the controller
    picks every row's action from the features' observation, the features account for the step,
    and the controller observes it as one step (:meth:`Step.merged`)."""

    def __init__(self, generation: Generation, controller: Controller, prices: Prices | None = None) -> None:
        self.generation, self.controller = generation, controller
        if prices is None:
            prices = default_prices(controller, generation.pair)
        drafters = getattr(controller, "drafters", (DEFAULT_DRAFTER,))
        prompt_length = round(sum(generation.prompt_lengths) / len(generation.prompt_lengths))
        self.features = FeatureTracker(
            GenerationSettings.of(generation, drafters=drafters),
            prompt_length,
            generation.lookup_match,
            prices,
        )
        controller.reset()

    def step(self) -> Step:
        step = self.generation.step(self.controller.act(self.features.vector()))
        self.features.update(step.results)
        self.controller.observe(step.merged())
        return step

    def rows_changed(self) -> None:
        """Rows joined or left outside a step: the features learn the batch's size, its rows' mean
        length and mean tokens generated."""
        generation = self.generation
        rows = generation.active
        self.features.set_rows(
            batch_size=len(rows),
            context_length=sum(len(generation.tokens[r]) for r in rows) / len(rows),
            generated=sum(len(generation.output_ids(r)) for r in rows) / len(rows),
        )


def default_prices(controller: Controller, pair: ModelPair) -> Prices | None:
    """The controller's ``machine_prices(pair)`` where it reads the machine's prices, else None."""
    lookup = getattr(controller, "machine_prices", None)
    return None if lookup is None else lookup(pair)


def drive(
    generation: Generation,
    controller: Controller,
    stop: Callable[[], bool] | None = None,
    prices: Prices | None = None,
) -> None:
    """Step ``generation`` to its end through the :class:`ControlLoop`; ``stop()``, asked after
    every step, may end it earlier; ``prices``: the price features' prior."""
    loop = ControlLoop(generation, controller, prices)
    while not generation.done:
        loop.step()
        if stop is not None and stop():
            return
