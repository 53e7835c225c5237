"""``SpeculativeDecoder``: whole generations, with a controller choosing (k, tau) each step."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from specrl.engine.batch import BatchGeneration
from specrl.engine.generation import Generation
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import DEFAULT_DRAFTER, GenerationOutput, GenerationStats
from specrl.features import FeatureTracker, GenerationSettings
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
    """

    def __init__(self, pair: ModelPair, controller: Controller) -> None:
        self.pair = pair
        self.controller = controller

    def start(
        self,
        prompt: str | list[int],
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop_at_eos: bool = True,
        keep_target_logits: bool = False,
    ) -> Generation:
        """Tokenize, prefill, and return the generation ready to be stepped."""
        prompt_ids = self.pair.encode(prompt) if isinstance(prompt, str) else list(prompt)
        sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
        return Generation(
            self.pair, prompt_ids, max_new_tokens, sampling, seed, stop_at_eos, keep_target_logits
        )

    def generate(
        self, prompt: str | list[int] | Sequence[str | list[int]], max_new_tokens: int = 64, **options
    ) -> GenerationOutput | BatchOutputs:
        """Decode one prompt to the end, or a list of prompts together (:meth:`generate_batch`).

        A string or a list of token ids is one prompt; a list of strings or of token-id lists is
        a batch. ``options``: temperature, top_k, top_p, seed, stop_at_eos, keep_target_logits
        (one prompt only: the output then carries the target's logits at every generated
        position, taken from the verify forwards)."""
        if isinstance(prompt, (list, tuple)) and not prompt:
            raise ValueError(
                "the prompt is empty: an empty list holds no token ids and no prompts; give at least one "
                "token of text to continue, or a list of prompts to decode together"
            )
        if isinstance(prompt, (list, tuple)) and not isinstance(prompt[0], int):
            return self.generate_batch(prompt, max_new_tokens, **options)
        generation = self.start(prompt, max_new_tokens, **options)
        drive(generation, self.controller)
        ids = generation.output_ids
        return GenerationOutput(
            text=self.pair.tokenizer.decode(ids),
            token_ids=ids,
            prompt_ids=generation.tokens[0, : generation.prompt_length].tolist(),
            stats=generation.stats(),
            steps=generation.steps,
            target_logits=generation.target_logits(),
        )

    def generate_batch(
        self,
        prompts: Sequence[str | list[int]],
        max_new_tokens: int = 64,
        temperature: float = 0.0,
        top_k: int = 0,
        top_p: float = 1.0,
        seed: int = 0,
        stop_at_eos: bool = True,
    ) -> BatchOutputs:
        """Decode ``prompts`` together (:mod:`specrl.engine.batch`): one action per batched step,
        each row accepting its own tokens. Returns one output per prompt, in order; the list's
        ``stats`` are the batch's totals (every row's tokens over the batch's time)."""
        ids = [self.pair.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        sampling = SamplingConfig(temperature=temperature, top_k=top_k, top_p=top_p)
        generation = BatchGeneration(self.pair, ids, max_new_tokens, sampling, seed, stop_at_eos)
        drive_batch(generation, self.controller)
        outputs = BatchOutputs(
            GenerationOutput(
                text=self.pair.tokenizer.decode(generation.output_ids(r)),
                token_ids=generation.output_ids(r),
                prompt_ids=ids[r],
                stats=generation.row_stats(r),
                steps=generation.row_steps(r),
            )
            for r in range(len(ids))
        )
        outputs.stats = generation.stats()
        return outputs


class BatchOutputs(list):
    """One :class:`GenerationOutput` per prompt of a batch; ``stats`` holds the batch's totals."""

    stats: GenerationStats


def drive(generation: Generation, controller: Controller, stop: Callable[[], bool] | None = None) -> None:
    """Step ``generation`` to its end with ``controller`` choosing each action from the features of
    :mod:`specrl.features` and observing each step's result; ``stop()``, asked after every step,
    may end it earlier. The one controller loop of the decoder and of :mod:`specrl.hf`."""
    settings = GenerationSettings.of(generation, drafters=getattr(controller, "drafters", (DEFAULT_DRAFTER,)))
    features = FeatureTracker(settings, generation.prompt_length, generation.lookup_match)
    controller.reset()
    while not generation.done:
        result = generation.step(controller.act(features.vector()))
        features.update(result)
        controller.observe(result)
        if stop is not None and stop():
            return


def drive_batch(generation: BatchGeneration, controller: Controller) -> None:
    """Step a batched generation to its end: one action per step for every row, chosen from the
    batch's features (:meth:`FeatureTracker.update_batch`); the controller observes the batch as
    one step (:meth:`BatchStepResult.merged`)."""
    settings = GenerationSettings.of(generation, drafters=getattr(controller, "drafters", (DEFAULT_DRAFTER,)))
    prompt_length = sum(generation.prompt_lengths) / len(generation.prompt_lengths)
    features = FeatureTracker(settings, round(prompt_length))
    controller.reset()
    while not generation.done:
        step = generation.step(controller.act(features.vector()))
        features.update_batch(step.results)
        controller.observe(step.merged())
