"""specrl: reinforcement learning for speculative decoding.

Usage::

    pair = specrl.load_pair()                      # embedded default pair, offline
    dec = specrl.SpeculativeDecoder(pair, controller=specrl.StaticController(4))
    out = dec.generate("def fib(n):", max_new_tokens=64)
    outs = dec.generate(["def fib(n):", "The river"], max_new_tokens=64)   # a batch: one output each
    specrl.StaticController(k=4, tau=0.0, drafter="ngram")   # drafter: specrl.engine.drafters
    env = gymnasium.make("specrl/SpecDecode-v0", scenario="envs/code.yaml")   # registered on import
    ctrl = specrl.LearnedController.load("policies/default")   # an exported PPO policy
"""

from specrl import quiet as quiet  # first: transformers' import, without its optional packages' noise

# isort: split
from specrl import hf as hf  # specrl.hf.speculative_generate, for HF generate
from specrl.controllers import (
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
from specrl.engine import (
    Action,
    DrafterError,
    Generation,
    GenerationOutput,
    GenerationStats,
    SamplingConfig,
    SpeculativeDecoder,
    StepResult,
)
from specrl.envs import Scenario, ScenarioError, SpecDecodeEnv, load_scenario
from specrl.features import FEATURE_NAMES, FEATURE_VERSION, FeatureTracker
from specrl.models import ModelPair, PairError, load_pair

__version__ = "0.1.0"

__all__ = [
    "BatchCutoffController",
    "BatchScheduleController",
    "FEATURE_NAMES",
    "FEATURE_VERSION",
    "Action",
    "Controller",
    "DrafterError",
    "FeatureTracker",
    "Generation",
    "GenerationOutput",
    "GenerationStats",
    "HFConfidenceController",
    "HFHeuristicController",
    "LearnedController",
    "ModelPair",
    "PairError",
    "PoolRuleController",
    "SamplingConfig",
    "Scenario",
    "ScenarioError",
    "SpecDecodeEnv",
    "SpeculativeDecoder",
    "StaticController",
    "StepResult",
    "TCPController",
    "load_pair",
    "load_scenario",
]
