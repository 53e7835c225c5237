"""The proposer's settings, the vLLM way: ``additional_config={"specrl": {...}}`` (``vllm serve
--additional-config '{"specrl": {"controller": "default"}}'`` or ``LLM(additional_config=...)``),
validated, with the environment variables below as a fallback for keys it leaves out.

vLLM hands a custom proposer nothing but its own config; ``additional_config`` is the part of it
vLLM keeps for extensions. An unknown key is refused with the nearest valid name, a wrong value
with what it must be (:class:`ProposerConfigError`), before the engine serves anything.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specrl.validation import explain, known_fields

#: The key of ``additional_config`` the proposer reads.
SECTION = "specrl"
#: Environment variables, read only for keys ``additional_config["specrl"]`` does not set.
CONTROLLER_VARIABLE = "SPECRL_VLLM_CONTROLLER"
DRAFT_VARIABLE = "SPECRL_VLLM_DRAFT"
MAX_BATCH_VARIABLE = "SPECRL_VLLM_MAX_BATCH"
PRICES_VARIABLE = "SPECRL_VLLM_PRICES"
TEMPERATURE_VARIABLE = "SPECRL_VLLM_TEMPERATURE"
RECORD_VARIABLE = "SPECRL_VLLM_RECORD"
VARIABLES = {
    "controller": CONTROLLER_VARIABLE,
    "draft": DRAFT_VARIABLE,
    "draft_cache": "SPECRL_VLLM_DRAFT_CACHE",
    "max_batch": MAX_BATCH_VARIABLE,
    "prices": PRICES_VARIABLE,
    "temperature": TEMPERATURE_VARIABLE,
    "record": RECORD_VARIABLE,
}
DEFAULT_MAX_NEW_TOKENS = 256  # the generated-tokens feature's scale when vLLM's budget is unknown


class ProposerConfigError(ValueError):
    """``additional_config["specrl"]`` (or a fallback variable) names an unknown key or a bad value."""


class ProposerSettings(BaseModel):
    """What the proposer runs (``additional_config["specrl"]``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: tcp, plain, static:K[:TAU], hf-heuristic, hf-confidence, a policy's name or folder, or
    #: package.module:Name of a controller class
    controller: str = "tcp"
    draft: str | None = None  # a draft model's folder or id; none: the n-gram lookup drafts
    #: the draft's KV cache: transformers' dynamic cache, a static one, or static with its decode
    #: forwards compiled (torch.compile, a graph per batch size and tokens fed)
    draft_cache: Literal["dynamic", "static", "compiled"] = "dynamic"
    prices: str | None = None  # the price features' prior: a latency profile or a latency model's JSON
    temperature: float = Field(0.0, ge=0)  # the temperature the controller is told the traffic has
    max_batch: int | None = Field(None, ge=1)  # speculate only with at most this many rows decoding
    max_new_tokens: int = Field(DEFAULT_MAX_NEW_TOKENS, ge=1)  # the generated-tokens feature's scale
    record: str | None = None  # a folder to record the served steps and requests into
    record_rate: float = Field(1.0, gt=0, le=1)  # the share of requests recorded

    def line(self) -> str:
        """The settings in one log line."""
        return ", ".join(f"{name}={value!r}" for name, value in self.model_dump().items())


def resolve(
    additional_config: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None = None
) -> ProposerSettings:
    """The settings: ``overrides`` (a script's keyword arguments, None left out) over
    ``additional_config["specrl"]`` over the environment variables (:data:`VARIABLES`)."""
    given = (additional_config or {}).get(SECTION) or {}
    where = f"additional_config[{SECTION!r}]"
    if not isinstance(given, Mapping):
        raise ProposerConfigError(f"{where} must be a mapping of keys to values, got {given!r}")
    fallback = {key: os.environ[name] for key, name in VARIABLES.items() if os.environ.get(name)}
    chosen = {**fallback, **given, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    try:
        return ProposerSettings.model_validate(chosen)
    except ValidationError as error:
        said = explain(error, lambda loc: known_fields(ProposerSettings))
        variable = next((VARIABLES[k] for k in fallback if k not in given and f"'{k}'" in said), None)
        source = f"${variable}" if variable else where
        raise ProposerConfigError(f"{source}: {said}") from None


class BatchSchedule:
    """The most tokens a row may draft at a batch size: vLLM's ``num_speculative_tokens_per_batch_size``
    (``[[first, last, k], ...]``: k for ``first`` to ``last`` rows; a gap or the rows past the last
    range keep the k before them, as vLLM's scheduler reads it) and the cut-off ``max_batch`` (none
    above it), each where set, both capped at ``k_max``."""

    def __init__(self, ranges: Sequence[Sequence[int]] | None, k_max: int, max_batch: int | None) -> None:
        self.ranges = sorted((int(first), int(last), int(k)) for first, last, k in ranges or ())
        self.k_max, self.max_batch = k_max, max_batch

    def __bool__(self) -> bool:
        return bool(self.ranges) or self.max_batch is not None

    def __call__(self, rows: int) -> int:
        if self.max_batch is not None and rows > self.max_batch:
            return 0
        k = self.k_max
        for first, last, scheduled in self.ranges:
            if rows < first:
                break
            k = scheduled  # rows in this range, or past it (a gap or the tail keeps it)
            if rows <= last:
                break
        return min(k, self.k_max)
