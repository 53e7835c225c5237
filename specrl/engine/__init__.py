"""KV-cached, lossless speculative decoding."""

from specrl.engine.batch import BatchGeneration, BatchStepResult, BatchTooLargeError
from specrl.engine.decoder import BatchOutputs, SpeculativeDecoder
from specrl.engine.drafters import DRAFTERS, DrafterError
from specrl.engine.generation import Generation, PromptTooLongError
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action, GenerationOutput, GenerationStats, StepResult

__all__ = [
    "DRAFTERS",
    "Action",
    "BatchGeneration",
    "BatchOutputs",
    "BatchStepResult",
    "BatchTooLargeError",
    "DrafterError",
    "Generation",
    "GenerationOutput",
    "GenerationStats",
    "PromptTooLongError",
    "SamplingConfig",
    "SpeculativeDecoder",
    "StepResult",
]
