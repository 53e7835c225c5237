"""Gymnasium environments for choosing (k, tau); registered on import.

env = gymnasium.make("specrl/SpecDecode-v0", scenario="code")      # the real loop
env = gymnasium.make("specrl/TraceReplay-v0", scenario="code")     # replayed traces
env = gymnasium.make("specrl/BatchReplay-v0", scenario="arrivals") # a batch of requests
"""

from specrl.envs.actions import InvalidActionError, to_engine_action
from specrl.envs.recording import cached_traces, collect_traces, record_episode
from specrl.envs.reward import step_reward
from specrl.envs.rollout import EpisodeSummary, run_episode
from specrl.envs.scenario import (
    DomainShift,
    PairSpec,
    PromptSpec,
    RewardSpec,
    Scenario,
    ScenarioError,
    SetupError,
    embedded_scenarios,
    load_scenario,
    shipped_scenarios,
)
from specrl.envs.spec_decode import SpecDecodeEnv
from specrl.envs.trace_replay import TraceReplayEnv
from specrl.latency import CostModel
from specrl.registration import BATCH_REPLAY_ID, SPEC_DECODE_ID, TRACE_REPLAY_ID

__all__ = [
    "BATCH_REPLAY_ID",
    "SPEC_DECODE_ID",
    "TRACE_REPLAY_ID",
    "CostModel",
    "DomainShift",
    "EpisodeSummary",
    "InvalidActionError",
    "PairSpec",
    "PromptSpec",
    "RewardSpec",
    "Scenario",
    "ScenarioError",
    "SetupError",
    "SpecDecodeEnv",
    "TraceReplayEnv",
    "VecTraceReplay",
    "cached_traces",
    "collect_traces",
    "load_scenario",
    "record_episode",
    "run_episode",
    "embedded_scenarios",
    "shipped_scenarios",
    "step_reward",
    "to_engine_action",
]


def __getattr__(name: str):
    # VecTraceReplay subclasses SB3's VecEnv; importing it lazily keeps ``import specrl`` (and
    # so online policy loading) free of stable-baselines3.
    if name == "VecTraceReplay":
        from specrl.envs.vec_replay import VecTraceReplay

        return VecTraceReplay
    raise AttributeError(f"module 'specrl.envs' has no attribute {name!r}")
