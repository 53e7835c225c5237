"""The exported policy artifact: write it from a PPO model, load it with torch alone, check parity.

A policy folder (docs/design.md, "Exported policies") holds ``policy.pt2`` (a ``torch.export``
program: (B, F) float32 observations -> (B, D) int64 actions ``[k, tau_index(, stop_index)(,
drafter_index)]``, observation statistics baked in), ``metadata.json`` (feature version, action
mapping, provenance, sha256 of every file), ``policy.onnx`` when ``onnx`` is installed, and for
further training ``sb3_model.zip`` and ``vecnormalize.pkl`` (pickles: load them only from folders
you trust). Online use (:func:`load_policy`) needs the first two and never imports
stable-baselines3.

Modules, each importing only those above it: ``layout`` (file names, format version,
:class:`PolicyError`), ``module`` (:class:`PolicyModule` and its program), ``read``, ``onnx_file``,
``parity``, ``write`` (:func:`export_policy`, the atomic install).
"""

from specrl.export.layout import (
    FORMAT_VERSION,
    METADATA_FILE,
    ONNX_FILE,
    POLICY_FILE,
    SB3_MODEL_FILE,
    VECNORMALIZE_FILE,
    PolicyError,
)
from specrl.export.parity import verify_parity
from specrl.export.read import ExportedPolicy, load_policy
from specrl.export.write import export_policy
from specrl.features import FEATURE_VERSION

__all__ = [
    "FEATURE_VERSION",
    "FORMAT_VERSION",
    "METADATA_FILE",
    "ONNX_FILE",
    "POLICY_FILE",
    "SB3_MODEL_FILE",
    "VECNORMALIZE_FILE",
    "ExportedPolicy",
    "PolicyError",
    "export_policy",
    "load_policy",
    "verify_parity",
]
