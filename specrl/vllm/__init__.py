"""specrl inside vLLM: :class:`Proposer`, a custom proposer that runs a specrl controller per
request (:mod:`specrl.vllm.proposer`; its settings are environment variables). vLLM loads it by name::

    LLM(model=target, speculative_config={
        "method": "custom_class", "model": "specrl.vllm.Proposer", "num_speculative_tokens": 8})

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
