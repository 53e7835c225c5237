"""Hugging Face ``generate`` on a (target, draft) pair: the peers' own engine, timed by the wall clock.

Transformers 5.x reads the assisted-generation settings (``num_assistant_tokens``, its schedule,
``assistant_confidence_threshold``) from the *assistant's* ``generation_config``, so a run swaps
its own config onto the draft for its calls only (:func:`assistant_settings`). HF's dynamic
confidence threshold adapts only when scikit-learn is installed (:func:`confidence_threshold_variant`,
which every report records). Every run emits exactly ``max_new_tokens`` tokens; its time is the
whole call's, prefill included, device-synchronised.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from transformers import GenerationConfig
from transformers.utils import is_sklearn_available

from specrl.engine.timing import DeviceClock
from specrl.models import ModelPair

#: The assistant settings HF reads from the draft's generation_config.
HF_ASSISTANT_KEYS = (
    "num_assistant_tokens",
    "num_assistant_tokens_schedule",
    "assistant_confidence_threshold",
)


def confidence_threshold_variant() -> str:
    """Which confidence threshold HF's assisted generation runs in this environment."""
    if is_sklearn_available():
        return "adaptive (ROC, scikit-learn installed)"
    return "fixed (scikit-learn not installed)"


def resolved_assistant_settings(config: GenerationConfig) -> dict:
    """The values HF's AssistedCandidateGenerator will use: ``config``, unset keys from HF's defaults."""
    resolved = copy.deepcopy(config)
    resolved.update(**resolved._get_default_generation_params(), defaults_only=True)
    return {key: getattr(resolved, key) for key in HF_ASSISTANT_KEYS}


def assistant_config(draft_config: GenerationConfig, **overrides: object) -> GenerationConfig:
    """A copy of the draft's generation_config with the given assistant settings."""
    config = copy.deepcopy(draft_config)
    for key, value in overrides.items():
        setattr(config, key, value)
    return config


@contextmanager
def assistant_settings(draft: torch.nn.Module, config: GenerationConfig | None) -> Iterator[None]:
    """Put ``config`` on the draft for the duration of one call (HF reads the assistant's config)."""
    if config is None:
        yield
        return
    original = draft.generation_config
    draft.generation_config = config
    try:
        yield
    finally:
        draft.generation_config = original


class ForwardCounter:
    """Counts forward calls of the target and the draft (pre-hooks; a context manager)."""

    def __init__(self, pair: ModelPair) -> None:
        self.counts = {"target": 0, "draft": 0}
        self.handles = [
            pair.target.register_forward_pre_hook(lambda *_: self._bump("target")),
            pair.draft.register_forward_pre_hook(lambda *_: self._bump("draft")),
        ]

    def _bump(self, role: str) -> None:
        self.counts[role] += 1

    def reset(self) -> None:
        self.counts = {"target": 0, "draft": 0}

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()

    def __enter__(self) -> ForwardCounter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.remove()


def generate_kwargs(max_new_tokens: int, temperature: float, top_k: int = 0, top_p: float = 1.0) -> dict:
    """``generate`` keyword arguments: exactly ``max_new_tokens`` tokens, greedy when temperature is 0."""
    kwargs: dict = {"max_new_tokens": max_new_tokens, "eos_token_id": None}
    if temperature > 0:
        kwargs.update(do_sample=True, temperature=temperature, top_k=top_k, top_p=top_p)
    else:
        kwargs.update(do_sample=False)
    return kwargs


@dataclass
class HFRun:
    """One timed ``generate`` call: the new ids, its seconds (the whole call, device-synchronised)
    and the forward calls of each model (prefill and first verification are one)."""

    ids: list[int]
    seconds: float
    target_forwards: int
    draft_forwards: int


def hf_generate(
    pair: ModelPair,
    prompt_ids: list[int],
    max_new_tokens: int,
    temperature: float = 0.0,
    seed: int = 0,
    assistant: GenerationConfig | None = None,
    top_k: int = 0,
    top_p: float = 1.0,
    counter: ForwardCounter | None = None,
) -> HFRun:
    """Run ``pair.target.generate`` once for exactly ``max_new_tokens`` tokens (temperature 0:
    greedy), with the draft as assistant under ``assistant`` (:func:`assistant_config`; None: plain
    ``generate``). ``seed`` seeds torch's global generator (HF samples from it); ``counter``: a
    :class:`ForwardCounter` on ``pair``, one is made for the call if None."""
    own_counter = counter is None
    counter = counter or ForwardCounter(pair)
    counter.reset()
    clock = DeviceClock(pair.device)
    input_ids = torch.tensor([prompt_ids], dtype=torch.long, device=pair.device)
    kwargs = generate_kwargs(max_new_tokens, temperature, top_k, top_p)
    if assistant is not None:
        kwargs["assistant_model"] = pair.draft
    torch.manual_seed(seed)
    try:
        with assistant_settings(pair.draft, assistant):
            start = clock.now()
            out = pair.target.generate(input_ids, attention_mask=torch.ones_like(input_ids), **kwargs)
            seconds = clock.now() - start
    finally:
        if own_counter:
            counter.remove()
    return HFRun(
        out[0, input_ids.shape[1] :].tolist(), seconds, counter.counts["target"], counter.counts["draft"]
    )
