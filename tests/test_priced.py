"""The priced rule: the k the machine's prices make fastest (the feature priced_k), with a probe."""

from __future__ import annotations

import numpy as np
import pytest

from specrl.controllers.priced import PROBE_AFTER, PricedController
from specrl.envs import TraceReplayEnv
from specrl.features import FEATURE_COUNTS, FEATURE_NAMES, N_FEATURES
from specrl.latency.family import profiles


def observation(**values: float) -> np.ndarray:
    out = np.zeros(N_FEATURES, dtype=np.float32)
    for name, value in values.items():
        out[FEATURE_NAMES.index(name)] = value
    return out


def test_it_plays_priced_k_and_probes_after_plain_steps():
    rule = PricedController()
    assert rule.act(observation(priced_k=3 / 16)).k == 3 and rule.act(observation(priced_k=3 / 16)).tau == 0.0
    assert rule.act(observation(priced_k=0.0, steps_since_draft=(PROBE_AFTER - 1) / 16)).k == 0
    assert rule.act(observation(priced_k=0.0, steps_since_draft=PROBE_AFTER / 16)).k == 1  # a probe
    with pytest.raises(ValueError, match="priced_k, feature version 5"):
        rule.act(np.zeros(FEATURE_COUNTS[4], dtype=np.float32))


def test_on_a_staircase_it_drafts_shorter_than_on_a_gpu(shifted, greedy_traces):
    """The same traces under two machines: the Xeon's step at the 4th token keeps its drafts short;
    a GPU-like machine, whose tokens after the 2nd are nearly free, drafts long."""
    known = profiles()
    mean_k = {}
    for name in ("cpu-xeon-2t", "gpu-like-a100"):
        env = TraceReplayEnv(shifted, traces=greedy_traces, latency=known[name])
        rule, ks = PricedController(), []
        for index in range(len(greedy_traces)):
            obs, _ = env.reset(seed=index, options={"trace_index": index})
            done = False
            while not done:
                action = rule.act(obs)
                ks.append(action.k)
                obs, _, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
        mean_k[name] = float(np.mean(ks))
    assert mean_k["cpu-xeon-2t"] <= 3 and mean_k["gpu-like-a100"] > mean_k["cpu-xeon-2t"] + 1
