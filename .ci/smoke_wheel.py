"""Smoke test of an installed (non-editable) specrl, run by .ci/run from outside the repository.

Checks that the package data came along: the shipped scenarios, the embedded pair's weights and
traces, the default policy; that the trace-replay simulator starts (without weights where its
traces are shipped and its latency is constant) and steps; and that the real loop steps.
"""

from __future__ import annotations

import sys
import time
from dataclasses import replace
from pathlib import Path

import gymnasium
import numpy as np

import specrl
from specrl.envs import SetupError, load_scenario, shipped_scenarios
from specrl.envs.scenario import PairSpec
from specrl.features import N_FEATURES
from specrl.latency import LatencyFamily
from specrl.serving import load_stream, shipped_streams

started = time.perf_counter()
package = Path(specrl.__file__).resolve().parent
repository = Path(__file__).resolve().parent.parent
if repository in package.parents or Path.cwd() in package.parents:
    sys.exit(f"smoke: specrl was imported from {package}, not from the installed wheel")

scenario = load_scenario("code")
assert scenario.name == "code" and "code" in scenario.prompts.domains, scenario
assert {"code", "mixed", "prose"} <= set(shipped_scenarios()), shipped_scenarios()
stream = load_stream("code_math_prose")  # the shipped request stream of experiments/serve_stream.py
assert stream.size == 88 and "code_math_prose" in shipped_streams(), shipped_streams()
family = LatencyFamily.training()  # the shipped calibrations the default trains over
assert len(family.models) == len(family.names) >= 6 and "cpu-epyc-2t-nov" in family.names, family.names
batch_family = LatencyFamily.training(batch=True)  # the batch calibrations the batch policy trains over
assert "cpu-xeon-1t" in batch_family.names, batch_family.names
assert all(group[0].batch_sizes[-1] == 64 for group in batch_family.models), batch_family.names


def replay(scenario, **kwargs) -> None:
    env = gymnasium.make("specrl/TraceReplay-v0", scenario=scenario, **kwargs)
    observation, _ = env.reset(seed=0)
    assert observation.shape == (N_FEATURES,), observation.shape
    env.action_space.seed(0)
    for _ in range(5):
        observation, reward, terminated, truncated, _ = env.step(env.action_space.sample())
        assert np.isfinite(reward), reward
        if terminated or truncated:
            break


# The simulator starts without model weights on the shipped traces (here with a constant latency).
real_load = PairSpec.load
PairSpec.load = lambda self: sys.exit("smoke: the trace-replay simulator loaded model weights")
replay(replace(scenario, latency="constant"))
PairSpec.load = real_load
# As a user runs it: with no calibration cached, the env refuses to measure unasked and names the
# command; prepare=True measures it (with progress) and caches it.
try:
    replay("code")
    sys.exit("smoke: the trace-replay simulator calibrated without being asked")
except SetupError as error:
    assert "specrl calibrate" in str(error) and "prepare=True" in str(error), error
replay("code", prepare=True)

# The real loop on the embedded pair, whose weights are package data too.
env = gymnasium.make("specrl/SpecDecode-v0", scenario="code")
env.reset(seed=0)
env.action_space.seed(0)
assert np.isfinite(env.step(env.action_space.sample())[1])

controller = specrl.LearnedController.load("default")
action = controller.act(np.zeros(N_FEATURES, dtype=np.float32))
assert 0 <= action.k <= controller.k_max, action

print(
    f"smoke: specrl {package} (scenarios {len(shipped_scenarios())}, policy k_max {controller.k_max}, "
    f"action {action.k}) ok in {time.perf_counter() - started:.1f} s"
)
