"""KV-cached, lossless speculative decoding: one engine over rows (a single sequence is a batch of one)."""

from specrl.engine.decoder import BatchOutputs, ControlLoop, SpeculativeDecoder
from specrl.engine.drafters import DRAFTERS, DrafterError
from specrl.engine.generation import Generation, PromptTooLongError
from specrl.engine.memory import BatchTooLargeError
from specrl.engine.sampling import SamplingConfig
from specrl.engine.types import Action, GenerationOutput, GenerationStats, Step, StepResult

__all__ = [
    "DRAFTERS",
    "Action",
    "BatchOutputs",
    "BatchTooLargeError",
    "ControlLoop",
    "DrafterError",
    "Generation",
    "GenerationOutput",
    "GenerationStats",
    "PromptTooLongError",
    "SamplingConfig",
    "SpeculativeDecoder",
    "Step",
    "StepResult",
]
