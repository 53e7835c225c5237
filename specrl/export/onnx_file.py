"""The optional ONNX copy of the policy (``policy.onnx``): write it, and run it with onnxruntime."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

INPUT_NAME = "observation"
OUTPUT_NAME = "action"


def write_onnx(module: nn.Module, path: Path) -> None:
    """Write ``module`` as ONNX (input "observation" (B, F), output "action" (B, D)) and check it."""
    import onnx

    # torch's default (dynamo) exporter needs onnxscript, which specrl does not depend on; the
    # TorchScript-based exporter handles this small MLP and warns that it is deprecated.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        torch.onnx.export(
            module,
            (torch.zeros(1, module.n_features),),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            dynamic_axes={INPUT_NAME: {0: "batch"}, OUTPUT_NAME: {0: "batch"}},
            dynamo=False,
        )
    onnx.checker.check_model(str(path))


def run_onnx(path: Path, observations: np.ndarray) -> np.ndarray:
    """The actions of ``policy.onnx`` at ``path`` for (N, 19) float32 observations, with onnxruntime."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run([OUTPUT_NAME], {INPUT_NAME: observations})[0]
