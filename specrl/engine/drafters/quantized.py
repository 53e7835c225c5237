"""INT8 and INT4 copies of a draft, quantised with torchao (PyTorch's maintained quantisation
library; ``torch.ao.quantization`` is deprecated in its favour).

- ``int8``: int8 weights, per output channel, on every linear layer (``Int8WeightOnlyConfig``).
- ``int4``: int4 weights in groups of 32 (``IntxWeightOnlyConfig(weight_dtype=torch.int4)``).
  torchao's dedicated int4 layouts (``Int4WeightOnlyConfig``) do not run here: on CPU they need
  the ``mslk`` kernels or bf16 weights, and the int32 plain layout refuses the CPU
  (``Int4PlainInt32Tensor does not support device 'cpu' yet``).

Weight-only, because it is the cheapest torchao path on this CPU at batch 1: one forward of the
default draft took 1.4 ms in fp32, 1.9 ms with int8 weights, 5.8 ms with int8 weights and
activations, 3.8 ms with int4 weights and 11.4 ms with int4 weights and int8 activations
(2 busy CPU cores, context 200). The draft is small enough to sit in cache, so there is no memory
traffic for quantisation to save; the bench (``experiments/bench_drafters.py``) measures it in the loop.

The embeddings stay in full precision (a lookup, not a matmul); the output projection is
quantised like every other linear layer. Quantisation changes q, and the accept/reject rule is
exact for whatever q the draft reports, so the output stays lossless: only acceptance changes.
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
