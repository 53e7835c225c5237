"""4D attention masks built by the engine, not by transformers.

transformers' mask builder decides whether it can skip the mask by reading it (or a static
cache's offset) to the host: a device sync on every forward a GPU runs, drafted tokens included.
The engine knows which slots each new token may see, so it builds the 4D mask itself, in the
form the model's attention kernel takes; transformers passes a 4D mask through unchanged.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedModel

PREPARED = ("sdpa", "eager")  # kernels that take a prepared 4D mask; others build their own


def takes_prepared(model: PreTrainedModel) -> bool:
    """Whether ``model``'s attention kernel takes a mask prepared by :func:`prepared_mask`."""
    return getattr(model.config, "_attn_implementation", None) in PREPARED


def prepared_mask(model: PreTrainedModel, allowed: torch.Tensor) -> torch.Tensor:
    """``allowed`` (B, 1, n, slots), True where a query may attend, in the form ``model``'s
    attention takes (:func:`takes_prepared`): boolean for sdpa, additive float for eager."""
    if model.config._attn_implementation == "sdpa":
        return allowed
    dtype = next(model.parameters()).dtype
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill(
        ~allowed, torch.finfo(dtype).min
    )


def causal(n: int, width: int, first: int, device: torch.device) -> torch.Tensor:
    """(n, width): the i-th of ``n`` new tokens, at slot ``first + i``, sees the slots up to its own."""
    return torch.ones((n, width), dtype=torch.bool, device=device).tril(first)
