"""specrl inside vLLM: :class:`Proposer`, a custom proposer that runs a specrl controller per
request (:mod:`specrl.vllm.proposer`), configured through vLLM's ``additional_config``
(:mod:`specrl.vllm.settings`). vLLM loads it by name::

    LLM(model=target, speculative_config={
        "method": "custom_class", "model": "specrl.vllm.Proposer", "num_speculative_tokens": 8},
        additional_config={"specrl": {"controller": "default", "draft": DRAFT_FOLDER}})

This package imports nothing of vLLM: vLLM imports it.
"""

from specrl.vllm.proposer import Proposer, controller_factory
from specrl.vllm.settings import (
    CONTROLLER_VARIABLE,
    DRAFT_VARIABLE,
    MAX_BATCH_VARIABLE,
    PRICES_VARIABLE,
    ProposerConfigError,
    ProposerSettings,
)

__all__ = [
    "CONTROLLER_VARIABLE",
    "DRAFT_VARIABLE",
    "MAX_BATCH_VARIABLE",
    "PRICES_VARIABLE",
    "Proposer",
    "ProposerConfigError",
    "ProposerSettings",
    "controller_factory",
]
