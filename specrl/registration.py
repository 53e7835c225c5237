"""specrl's Gymnasium ids, registered when ``specrl`` is imported (cheaply: by entry-point strings,
so the envs' modules load only when an env is made)."""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

SPEC_DECODE_ID = "specrl/SpecDecode-v0"
TRACE_REPLAY_ID = "specrl/TraceReplay-v0"
BATCH_REPLAY_ID = "specrl/BatchReplay-v0"

if SPEC_DECODE_ID not in registry:  # importing twice (reload) must not re-register
    # Wall-clock time varies from run to run, so the env as registered is nondeterministic;
    # with time="modeled" a seeded episode is reproducible.
    register(id=SPEC_DECODE_ID, entry_point="specrl.envs.spec_decode:SpecDecodeEnv", nondeterministic=True)
if TRACE_REPLAY_ID not in registry:
    # Modeled time and seeded acceptance draws: a seeded episode is reproducible.
    register(id=TRACE_REPLAY_ID, entry_point="specrl.envs.trace_replay:TraceReplayEnv")
if BATCH_REPLAY_ID not in registry:
    # The batch simulator: modeled time, seeded traces, draws and arrivals.
    register(id=BATCH_REPLAY_ID, entry_point="specrl.envs.batch_replay:BatchReplayEnv")
