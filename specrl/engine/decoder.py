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
    """Lossless speculative decoding of a (target, draft) pair.

    Before every iteration the controller is asked for an :class:`Action`, given the
    observation vector of :mod:`specrl.features` (the same one the envs produce), and after
    it is told the :class:`StepResult`. The output is distributed exactly as sampling from
    the target alone, whatever the controller does.

    Example::

        pair = specrl.load_pair()
        decoder = specrl.SpeculativeDecoder(pair, controller=specrl.StaticController(4, 0.0))
        out = decoder.generate("def fib(n):", max_new_tokens=64)
        print(out.text, out.stats.tokens_per_s)

    ``prices``: the prior of the price features (:mod:`specrl.features`), a latency model's
    ``price_line``. A policy of feature version 4 or later reads the machine's prices (version 5
    also the calibration's verification curve); given none, it takes this machine's cached
    calibrations of the pair (:func:`default_prices`), and where none is cached (a warning says
    so) they are measured from the steps alone and the curve's features are 0.
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
        """Decode one prompt to the end, or a list of prompts together: one action per step, each
        row accepting its own tokens.

        A string or a list of token ids is one prompt, and one :class:`GenerationOutput` comes
        back; a list of strings or of token-id lists is a batch, and a :class:`BatchOutputs` (one
        output per prompt, in order; its ``stats`` are the batch's totals: every row's tokens over
        the batch's time) comes back. ``options``: temperature, top_k, top_p, seed, stop_at_eos,
        keep_target_logits (each output then carries the target's logits at every generated
        position, taken from the verify forwards)."""
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
    """The one controller loop: before every step the controller is given the observation of
    :mod:`specrl.features` and picks the action every row takes; after it, the features account
    for the step (:meth:`FeatureTracker.update`, B = 1 the batch of one) and the controller
    observes it as one step (:meth:`Step.merged`). The decoder, :mod:`specrl.hf` and continuous
    batching (:mod:`specrl.serving.continuous`) all step generations through it."""

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
    """The prior a controller that reads the machine's prices brings when none is given: its
    ``machine_prices(pair)`` (a learned policy of feature version 4 or later and the priced rule:
    this machine's cached calibrations), else None."""
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
