"""Gymnasium environments for choosing (k, tau); registered on import.

    env = gymnasium.make("specrl/SpecDecode-v0", scenario="envs/code.yaml")
"""

from gymnasium.envs.registration import register, registry

from specrl.envs.cost_model import CostModel
from specrl.envs.reward import step_reward
from specrl.envs.rollout import EpisodeSummary, run_episode
from specrl.envs.scenario import (
    DomainShift,
    PairSpec,
    PromptSpec,
    RewardSpec,
    Scenario,
    ScenarioError,
    load_scenario,
    shipped_scenarios,
)
from specrl.envs.spec_decode import InvalidActionError, SpecDecodeEnv

SPEC_DECODE_ID = "specrl/SpecDecode-v0"

if SPEC_DECODE_ID not in registry:  # importing twice (reload) must not re-register
    # Wall-clock time varies from run to run, so the env as registered is nondeterministic;
    # with time="modeled" a seeded episode is reproducible.
    register(id=SPEC_DECODE_ID, entry_point="specrl.envs.spec_decode:SpecDecodeEnv", nondeterministic=True)

__all__ = [
    "SPEC_DECODE_ID",
    "CostModel",
    "DomainShift",
    "EpisodeSummary",
    "InvalidActionError",
    "PairSpec",
    "PromptSpec",
    "RewardSpec",
    "Scenario",
    "ScenarioError",
    "SpecDecodeEnv",
    "load_scenario",
    "run_episode",
    "shipped_scenarios",
    "step_reward",
]
