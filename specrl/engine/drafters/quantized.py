"""INT8 and INT4 weight-only copies of a draft, quantised with torchao.

- ``int8``: int8 weights per output channel on every linear layer (``Int8WeightOnlyConfig``);
- ``int4``: int4 weights in groups of 32 (``IntxWeightOnlyConfig``; torchao's dedicated int4
  layouts do not run on CPU).

Weight-only is torchao's cheapest path on CPU at batch 1; embeddings stay in full precision.
Quantisation changes q, and the accept/reject rule is exact for any q: only acceptance changes.
"""

from __future__ import annotations

import copy
import warnings

import torch
from transformers import PreTrainedModel

from specrl.engine.drafters.base import DrafterError

BITS = (8, 4)
GROUP_SIZE = 32


def _configs(bits: int):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from torchao.quantization import Int8WeightOnlyConfig, IntxWeightOnlyConfig, PerGroup
    except ImportError as error:
        raise DrafterError(
            f"the int{bits} draft needs torchao, which is not installed ({error}); "
            "install it with `pip install 'specrl[quant]'` (or `pip install torchao`)"
        ) from error
    if bits == 8:
        return Int8WeightOnlyConfig()
    return IntxWeightOnlyConfig(weight_dtype=torch.int4, granularity=PerGroup(GROUP_SIZE))


def quantize(model: PreTrainedModel, bits: int) -> PreTrainedModel:
    """A quantised copy of ``model`` (the original is left as it is); errors name what is missing."""
    if bits not in BITS:
        raise DrafterError(f"quantisation to {bits} bits is not offered; choose one of {BITS}")
    config = _configs(bits)
    from torchao.quantization import quantize_

    dtype = next(model.parameters()).dtype
    if dtype != torch.float32:
        raise DrafterError(
            f"the int{bits} draft is quantised from fp32 weights, but the draft is {dtype}; load the pair "
            "with dtype=torch.float32"
        )
    quantized = copy.deepcopy(model)
    device = next(model.parameters()).device
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            quantize_(quantized, config)
            with torch.inference_mode():  # a smoke forward: a layout this device cannot run fails here
                quantized(input_ids=torch.zeros((1, 2), dtype=torch.long, device=device))
    except Exception as error:  # noqa: BLE001 - name the library's own reason
        raise DrafterError(
            f"torchao could not quantise the draft to int{bits} on {device.type}: "
            f"{type(error).__name__}: {error}"
        ) from error
    return quantized.eval()
