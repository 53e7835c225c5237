"""specrl inside Hugging Face ``generate``: a ``custom_generate`` callable that decodes speculatively.

Transformers 5.x hands ``generate``'s decoding loop to ``custom_generate=``, with the prepared
``input_ids``, logits processors, stopping criteria and generation config, plus any keyword of its
own signature. :func:`speculative_generate` runs specrl's engine there, a controller or an exported
policy choosing (k, tau) before every iteration::

    out = target.generate(input_ids, custom_generate=speculative_generate, draft=draft_model,
                          controller="default", max_new_tokens=64)   # prompt + new tokens

Honoured: ``max_new_tokens`` / ``max_length``, ``eos_token_id`` and every stopping criterion,
``do_sample`` with the temperature/top-k/top-p warpers ``generate`` prepared (so its defaults
hold), ``return_dict_in_generate`` (:class:`SpeculativeGenerateOutput`, with the engine's
``stats`` and ``steps``), and a left-padded batch (the engine's rows, one controller; the output
right-padded with ``pad_token_id``). Greedy output equals plain ``generate``; sampled output has its
law. Refused, each by name: beams, several return sequences, right padding, any other logits
processor, scores/logits/attentions/hidden states in the output, and a pre-filled cache. Sampling
draws from specrl's own generator, seeded by ``seed`` or by one draw from torch's global one.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation import (
    EosTokenCriteria,
    LogitsProcessorList,
    MaxLengthCriteria,
    StoppingCriteriaList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)
from transformers.generation.utils import GenerateDecoderOnlyOutput

from specrl.controllers import Controller, LearnedController, TCPController
from specrl.engine import Generation, GenerationStats, SamplingConfig, StepResult
from specrl.engine.decoder import drive
from specrl.models import ModelPair, output_rows

__all__ = ["SpeculativeGenerateOutput", "pair_from_models", "speculative_generate"]

#: The warpers whose law specrl reproduces, in the order HF applies them (and SamplingConfig does).
_WARPERS = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)


@dataclass
class SpeculativeGenerateOutput(GenerateDecoderOnlyOutput):
    """``generate``'s decoder-only output plus the engine's record: the generation's ``stats`` and
    one :class:`~specrl.StepResult` per iteration in ``steps`` (a batch's rows merged into one)."""

    stats: GenerationStats | None = None
    steps: list[StepResult] | None = None


def pair_from_models(
    target: PreTrainedModel,
    draft: PreTrainedModel,
    tokenizer: Any = None,
    vocab_size: int | None = None,
) -> ModelPair:
    """A :class:`~specrl.ModelPair` around two loaded HF causal LMs on one device (``tokenizer``:
    only to encode text). ``vocab_size``: the shared vocabulary when the output layers differ only
    by padding rows; default: both must have the same number of output rows.

    Raises:
        ValueError: a model is not a decoder-only PreTrainedModel, the two sit on different
            devices, or their vocabularies differ (the message gives both sizes and the fix).
    """
    for role, model in (("target", target), ("draft", draft)):
        if not isinstance(model, PreTrainedModel):
            raise ValueError(
                f"the {role} must be a loaded Hugging Face causal LM (PreTrainedModel), got "
                f"{type(model).__name__}; load it with AutoModelForCausalLM.from_pretrained"
            )
        if model.config.is_encoder_decoder:
            raise ValueError(
                f"the {role} {type(model).__name__} is an encoder-decoder; specrl needs decoder-only models"
            )
    if target.device != draft.device:
        raise ValueError(
            f"the target is on {target.device} and the draft on {draft.device}; move both to one device "
            f"(draft.to(target.device))"
        )
    target_rows, draft_rows = output_rows(target), output_rows(draft)
    if vocab_size is None:
        if target_rows != draft_rows:
            raise ValueError(
                f"the draft's vocabulary ({draft_rows} output rows, {type(draft).__name__}) differs from "
                f"the target's ({target_rows}, {type(target).__name__}), so draft tokens cannot be "
                "verified. Use a draft trained with the target's tokenizer; if the two differ only by "
                "padding rows beyond the tokenizer, pass vocab_size=len(tokenizer)"
            )
        vocab_size = target_rows
    elif not 0 < vocab_size <= min(target_rows, draft_rows):
        raise ValueError(
            f"vocab_size={vocab_size} must lie in 1..{min(target_rows, draft_rows)}: the target has "
            f"{target_rows} output rows and the draft {draft_rows}"
        )
    context = min(
        getattr(m.config.get_text_config(), "max_position_embeddings", None) or 2**31 for m in (target, draft)
    )
    eos = target.generation_config.eos_token_id
    return ModelPair(
        target=target,
        draft=draft,
        tokenizer=tokenizer,
        device=target.device,
        dtype=target.dtype,
        name=f"{target.name_or_path or type(target).__name__}+{draft.name_or_path or type(draft).__name__}",
        vocab_size=vocab_size,
        context_length=context,
        eos_token_id=eos if isinstance(eos, int) else None,
    )


def resolve_controller(controller: Controller | str | Path | None) -> Controller:
    """A controller object as is; a policy folder (or a shipped policy's name) loaded as a
    :class:`~specrl.LearnedController`; None: the TCP-like heuristic."""
    if controller is None:
        return TCPController()
    if isinstance(controller, str | Path):
        return LearnedController.load(controller)
    if not isinstance(controller, Controller):
        raise TypeError(
            f"controller must be a specrl controller (reset/act/observe), an exported policy folder or a "
            f"shipped policy's name, got {type(controller).__name__}"
        )
    return controller


def sampling_from(processors: LogitsProcessorList, generation_config: GenerationConfig) -> SamplingConfig:
    """The :class:`SamplingConfig` with ``generate``'s law: greedy, or its temperature/top-k/top-p warpers.

    Raises:
        NotImplementedError: a processor other than those three, or them in another order.
    """
    others = [type(p).__name__ for p in processors if not isinstance(p, _WARPERS)]
    if others:
        raise NotImplementedError(
            f"speculative_generate reproduces only temperature, top_k and top_p; drop {', '.join(others)} "
            "(or decode with plain generate): another logits processor would change the target's law"
        )
    if not generation_config.do_sample:
        if processors:
            raise NotImplementedError(
                "greedy decoding with sampling warpers is not supported; set do_sample=True"
            )
        return SamplingConfig(temperature=0.0)
    order = [next(i for i, kind in enumerate(_WARPERS) if isinstance(p, kind)) for p in processors]
    if order != sorted(set(order)):
        raise NotImplementedError(
            "speculative_generate applies temperature, then top_k, then top_p (once each), as generate does; "
            f"got {[type(p).__name__ for p in processors]}"
        )
    values: dict[str, float] = {"temperature": 1.0, "top_k": 0, "top_p": 1.0}
    for processor in processors:
        if isinstance(processor, TemperatureLogitsWarper):
            values["temperature"] = float(processor.temperature)
        elif isinstance(processor, TopKLogitsWarper):
            values["top_k"] = int(processor.top_k)
        else:
            if processor.min_tokens_to_keep != 1:
                raise NotImplementedError(f"top_p with min_tokens_to_keep={processor.min_tokens_to_keep}")
            values["top_p"] = float(processor.top_p)
    return SamplingConfig(**values)


def _check_unsupported(generation_config: GenerationConfig, model_kwargs: dict) -> None:
    if generation_config.num_beams not in (None, 1):
        raise NotImplementedError(
            f"speculative_generate does not do beam search (num_beams={generation_config.num_beams})"
        )
    if (generation_config.num_return_sequences or 1) > 1:
        raise NotImplementedError(
            "speculative_generate returns one sequence per call (num_return_sequences="
            f"{generation_config.num_return_sequences}); call it again for more samples"
        )
    if generation_config.return_dict_in_generate:
        wanted = [
            name
            for name in ("output_scores", "output_logits", "output_attentions", "output_hidden_states")
            if getattr(generation_config, name, False)
        ]
        if wanted:
            raise NotImplementedError(
                f"speculative_generate returns sequences and specrl stats, not {', '.join(wanted)}"
            )
    cache = model_kwargs.get("cache") or model_kwargs.get("past_key_values")
    if cache is not None and hasattr(cache, "get_seq_length") and cache.get_seq_length() > 0:
        raise NotImplementedError(
            "speculative_generate keeps its own KV caches for both models; pass the whole prompt, "
            "not a pre-filled cache"
        )


def _prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> list[list[int]]:
    """Each row's prompt without its left padding (the attention mask's leading 0s)."""
    if input_ids.dim() != 2 or input_ids.shape[0] < 1:
        raise ValueError(f"input_ids must be (batch, length), got shape {tuple(input_ids.shape)}")
    prompts = []
    for r, ids in enumerate(input_ids.tolist()):
        mask = [1] * len(ids) if attention_mask is None else attention_mask[r].tolist()
        first = mask.index(1) if 1 in mask else len(mask)
        if not all(mask[first:]):
            raise NotImplementedError(
                "speculative_generate accepts left padding only (an attention mask of 0s then 1s); "
                f"row {r} is padded elsewhere: pad on the left (tokenizer.padding_side = 'left')"
            )
        prompts.append(ids[first:])
    return prompts


def _stop_position(tokens: list[int], start: int, eos: set[int], others: StoppingCriteriaList) -> int | None:
    """The length at which generation stops, checking tokens ``start..`` one by one, else None."""
    sequence = torch.tensor([tokens]) if others else None
    for end in range(start + 1, len(tokens) + 1):
        if tokens[end - 1] in eos:
            return end
        if others and bool(others(sequence[:, :end], None).any()):
            return end
    return None


def speculative_generate(
    model: PreTrainedModel,
    input_ids: torch.LongTensor,
    logits_processor: LogitsProcessorList | None = None,
    stopping_criteria: StoppingCriteriaList | None = None,
    generation_config: GenerationConfig | None = None,
    draft: PreTrainedModel | None = None,
    controller: Controller | str | Path | None = None,
    seed: int | None = None,
    vocab_size: int | None = None,
    **model_kwargs: Any,
) -> torch.LongTensor | SpeculativeGenerateOutput:
    """Decode speculatively inside ``model.generate(..., custom_generate=speculative_generate, draft=...)``
    (module doc); the four arguments below are passed to ``generate`` by name.

    Args:
        draft: the draft model (required): a causal LM on the target's device, same vocabulary.
        controller: a specrl controller, an exported policy folder or a shipped policy's name
            (:func:`resolve_controller`); default the TCP-like heuristic.
        seed: seed of the sampling generator (default: drawn from torch's global generator).
        vocab_size: the shared vocabulary when the output layers differ only by padding rows.

    Returns:
        (batch, prompt + new tokens) ids, as plain ``generate``; with ``return_dict_in_generate``
        a :class:`SpeculativeGenerateOutput`.

    Raises:
        ValueError: no draft, a draft the target cannot verify, or no room for a new token.
        NotImplementedError: a ``generate`` option the engine does not honour.
    """
    if draft is None:
        raise ValueError(
            "speculative_generate needs a draft model: generate(ids, custom_generate=speculative_generate, "
            "draft=draft_model, ...)"
        )
    generation_config = generation_config or model.generation_config
    logits_processor = logits_processor if logits_processor is not None else LogitsProcessorList()
    stopping_criteria = stopping_criteria if stopping_criteria is not None else StoppingCriteriaList()
    _check_unsupported(generation_config, model_kwargs)
    prompts = _prompts(input_ids, model_kwargs.get("attention_mask"))
    sampling = sampling_from(logits_processor, generation_config)
    pair = pair_from_models(model, draft, vocab_size=vocab_size)
    controller = resolve_controller(controller)
    if isinstance(controller, LearnedController) and model.name_or_path:
        warning = controller.target_warning(model.name_or_path)
        if warning:
            warnings.warn(warning, UserWarning, stacklevel=2)

    # The stopping criteria: the length ones become the engine's budget, EOS a set of ids, the
    # rest (stop strings, max time ...) are asked at every new token.
    max_length = generation_config.max_length
    eos: set[int] = set()
    others = StoppingCriteriaList()
    for criterion in stopping_criteria:
        if isinstance(criterion, MaxLengthCriteria):
            max_length = min(max_length or criterion.max_length, criterion.max_length)
        elif isinstance(criterion, EosTokenCriteria):
            eos.update(int(t) for t in criterion.eos_token_id.flatten().tolist())
        else:
            others.append(criterion)
    if max_length is None:
        raise ValueError("give max_new_tokens (or max_length) to generate")
    budget = max_length - input_ids.shape[1]
    if budget < 1:
        raise ValueError(
            f"no room for a new token: max_length is {max_length} and the input has {input_ids.shape[1]} "
            "tokens; raise max_new_tokens"
        )
    if seed is None:
        seed = int(torch.randint(0, 2**62, (1,)).item())

    generation = Generation(pair, prompts, budget, sampling, seed=seed, stop_at_eos=False)
    checked = [len(prompt) for prompt in prompts]  # each row's tokens already checked against the stops
    stops: list[int | None] = [None] * len(prompts)

    def stop() -> bool:
        """Ask the stopping criteria about every row's new tokens; rows that stop leave the batch."""
        stopped = []
        for r in generation.active:
            sequence = generation.tokens[r]  # grown in place by every step
            stops[r] = _stop_position(sequence, checked[r], eos, others)
            checked[r] = len(sequence)
            if stops[r] is not None:
                stopped.append(r)
        if stopped:
            generation.finish(stopped)
        return generation.done

    drive(generation, controller, stop)

    rows = [generation.tokens[r][: stops[r]] for r in range(len(prompts))]  # each cut at its stop
    sequences = _padded(rows, prompts, input_ids, generation_config, eos)
    if not generation_config.return_dict_in_generate:
        return sequences
    stats = generation.stats()
    stats.new_tokens = sum(len(row) - len(prompt) for row, prompt in zip(rows, prompts, strict=True))
    steps = [step.merged() for step in generation.steps]
    return SpeculativeGenerateOutput(sequences=sequences, stats=stats, steps=steps)


def _padded(
    rows: list[list[int]],
    prompts: list[list[int]],
    input_ids: torch.Tensor,
    generation_config: GenerationConfig,
    eos: set[int],
) -> torch.Tensor:
    """The rows (prompt and new tokens) as ``generate`` returns them: each after its input's left
    padding, right-padded to the longest (:func:`_pad_token`) where rows stopped apart."""
    length = input_ids.shape[1]
    out = [
        ids[: length - len(prompt)] + row
        for ids, row, prompt in zip(input_ids.tolist(), rows, prompts, strict=True)
    ]
    width = max(len(row) for row in out)
    if any(len(row) < width for row in out):
        pad = _pad_token(generation_config, eos)
        out = [row + [pad] * (width - len(row)) for row in out]
    return torch.tensor(out, device=input_ids.device)


def _pad_token(generation_config: GenerationConfig, eos: set[int]) -> int:
    """What pads rows that stopped early, as ``generate`` pads them: ``pad_token_id``, else an EOS id."""
    if generation_config.pad_token_id is not None:
        return int(generation_config.pad_token_id)
    if eos:
        return min(eos)
    raise ValueError(
        "rows of the batch stopped at different lengths and there is no pad_token_id (nor an EOS id) "
        "to pad them with: set generation_config.pad_token_id"
    )
