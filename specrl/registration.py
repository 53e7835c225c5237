"""specrl's Gymnasium ids, registered when ``specrl`` is imported (by entry-point strings, so an
env's module loads only when the env is made)."""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

SPEC_DECODE_ID = "specrl/SpecDecode-v0"
TRACE_REPLAY_ID = "specrl/TraceReplay-v0"
BATCH_REPLAY_ID = "specrl/BatchReplay-v0"

if SPEC_DECODE_ID not in registry:  # importing twice (reload) must not re-register
    # wall-clock time varies from run to run; with time="modeled" a seeded episode is reproducible
    register(id=SPEC_DECODE_ID, entry_point="specrl.envs.spec_decode:SpecDecodeEnv", nondeterministic=True)
    register(id=TRACE_REPLAY_ID, entry_point="specrl.envs.trace_replay:TraceReplayEnv")
    register(id=BATCH_REPLAY_ID, entry_point="specrl.envs.batch_replay:BatchReplayEnv")
