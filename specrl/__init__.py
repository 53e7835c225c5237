"""specrl: reinforcement learning for speculative decoding.

    pair = specrl.load_pair()                      # embedded default pair, offline
    dec = specrl.SpeculativeDecoder(pair, controller=specrl.StaticController(4))
    out = dec.generate("def fib(n):", max_new_tokens=64)
"""

from specrl.controllers import Controller, StaticController
from specrl.engine import (
    Action,
    Generation,
    GenerationOutput,
    GenerationStats,
    SamplingConfig,
    SpeculativeDecoder,
    StepResult,
)
from specrl.models import ModelPair, PairError, load_pair

__version__ = "0.1.0"

__all__ = [
    "Action",
    "Controller",
    "Generation",
    "GenerationOutput",
    "GenerationStats",
    "ModelPair",
    "PairError",
    "SamplingConfig",
    "SpeculativeDecoder",
    "StaticController",
    "StepResult",
    "load_pair",
]
