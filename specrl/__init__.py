"""specrl: reinforcement learning for speculative decoding.

Usage::

    pair = specrl.load_pair()                      # embedded default pair, offline
    dec = specrl.SpeculativeDecoder(pair, controller=specrl.StaticController(4))
    out = dec.generate("def fib(n):", max_new_tokens=64)
    outs = dec.generate(["def fib(n):", "The river"], max_new_tokens=64)   # a batch: one output each
    specrl.StaticController(k=4, tau=0.0, drafter="ngram")   # drafter: specrl.engine.drafters
    env = gymnasium.make("specrl/SpecDecode-v0", scenario="code")   # registered on import
    ctrl = specrl.LearnedController.load("default")   # an exported PPO policy, by name or folder

The names below load on first use (PEP 562), so ``import specrl`` and the ``specrl`` command's
``--help`` do not pay for torch and transformers.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING, Any

from specrl import registration as registration  # the Gymnasium ids: cheap, and there on import

# transformers imports torchao when it is installed, which logs every CUDA kernel library it cannot
# load, and torch warns about the enums torchao registers: noise about a quantised drafter nobody
# asked for (whose build reports its own errors). Held at ERROR unless the user set a level.
for _name in ("torchao", "torch.utils._pytree"):
    if logging.getLogger(_name).level == logging.NOTSET:
        logging.getLogger(_name).setLevel(logging.ERROR)

__version__ = "0.1.0"

#: Public name -> the module that defines it.
_LAZY = {
    **dict.fromkeys(
        (
            "BatchCutoffController",
            "BatchScheduleController",
            "Controller",
            "HFConfidenceController",
            "HFHeuristicController",
            "LearnedController",
            "PoolRuleController",
            "StaticController",
            "TCPController",
        ),
        "specrl.controllers",
    ),
    **dict.fromkeys(
        (
            "Action",
            "DrafterError",
            "Generation",
            "GenerationOutput",
            "GenerationStats",
            "SamplingConfig",
            "SpeculativeDecoder",
            "StepResult",
        ),
        "specrl.engine",
    ),
    **dict.fromkeys(("Scenario", "ScenarioError", "SpecDecodeEnv", "load_scenario"), "specrl.envs"),
    **dict.fromkeys(("FEATURE_NAMES", "FEATURE_VERSION", "FeatureTracker"), "specrl.features"),
    **dict.fromkeys(("ModelPair", "PairError", "load_pair"), "specrl.models"),
}

__all__ = sorted(_LAZY)  # and below, the same names for type checkers


def __getattr__(name: str) -> Any:
    if name == "hf":  # specrl.hf.speculative_generate, for HF generate
        return importlib.import_module("specrl.hf")
    if name not in _LAZY:
        raise AttributeError(f"module 'specrl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_LAZY, "hf"])


if TYPE_CHECKING:
    from specrl import hf as hf  # noqa: F401
    from specrl.controllers import (  # noqa: F401
        BatchCutoffController,
        BatchScheduleController,
        Controller,
        HFConfidenceController,
        HFHeuristicController,
        LearnedController,
        PoolRuleController,
        StaticController,
        TCPController,
    )
    from specrl.engine import (  # noqa: F401
        Action,
        DrafterError,
        Generation,
        GenerationOutput,
        GenerationStats,
        SamplingConfig,
        SpeculativeDecoder,
        StepResult,
    )
    from specrl.envs import Scenario, ScenarioError, SpecDecodeEnv, load_scenario  # noqa: F401
    from specrl.features import FEATURE_NAMES, FEATURE_VERSION, FeatureTracker  # noqa: F401
    from specrl.models import ModelPair, PairError, load_pair  # noqa: F401
