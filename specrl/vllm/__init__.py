"""specrl inside vLLM: :class:`Proposer`, a custom proposer that runs a specrl controller per
request (:mod:`specrl.vllm.proposer`). vLLM loads it by name::

    LLM(model=target, speculative_config={
        "method": "custom_class", "model": "specrl.vllm.Proposer", "num_speculative_tokens": 8})

with the controller in ``$SPECRL_VLLM_CONTROLLER``, the draft model in ``$SPECRL_VLLM_DRAFT``, the
largest batch that speculates in ``$SPECRL_VLLM_MAX_BATCH`` and the price features' prior (a
latency profile such as ``gpu-like-h100``, or a latency model file) in ``$SPECRL_VLLM_PRICES``.

This package imports nothing of vLLM: vLLM imports it.
"""

from specrl.vllm.proposer import (
    CONTROLLER_VARIABLE,
    DRAFT_VARIABLE,
    MAX_BATCH_VARIABLE,
    PRICES_VARIABLE,
    Proposer,
    controller_factory,
)

__all__ = [
    "CONTROLLER_VARIABLE",
    "DRAFT_VARIABLE",
    "MAX_BATCH_VARIABLE",
    "PRICES_VARIABLE",
    "Proposer",
    "controller_factory",
]
