"""KV-cached, lossless speculative decoding."""

from specrl.engine.decoder import SpeculativeDecoder
from specrl.engine.drafters import DRAFTERS, DrafterError
from specrl.engine.generation import Generation, PromptTooLongError
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action, GenerationOutput, GenerationStats, StepResult

__all__ = [
    "DRAFTERS",
    "Action",
    "DrafterError",
    "Generation",
    "GenerationOutput",
    "GenerationStats",
    "PromptTooLongError",
    "SamplingConfig",
    "SpeculativeDecoder",
    "StepResult",
]
