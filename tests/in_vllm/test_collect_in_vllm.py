"""``specrl collect --engine vllm``'s collector for real (vLLM's CPU build, the embedded pair): the
code scenario's test prompts served through vLLM, the proposer alternating the n-gram lookup and the
draft model step by step; the traces load and play in the trace-replay env, every recorded step
replays exactly on its trace (greedy: the lookup by construction, the draft model where its
KV-cached argmax is the teacher-forced one, on this run everywhere), and vLLM's recorded steps fit
the serving latency model (its held-out error is printed, not asserted: 4 short requests are too
few steps to price a machine; ``experiments/vllm_prices.py`` measures it).

Runs in the vLLM environment (``tests/conftest.py`` leaves this folder out elsewhere); the engine
runs in this process, so the controller class of this module can be named.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

import pytest  # noqa: E402

from specrl.engine.types import Action  # noqa: E402
from specrl.envs import TraceReplayEnv, load_scenario, run_episode  # noqa: E402
from specrl.evaluation.roster import make_controller  # noqa: E402
from specrl.latency.serving import fit_serving_latency, read_served_steps  # noqa: E402
from specrl.vllm.collect import AGREEMENT_FILE, VLLMCollector  # noqa: E402
from specrl.vllm.recorder import STEPS_FILE, read_requests  # noqa: E402

K_MAX = 4
NEW_TOKENS = 32


class Alternating:
    """k = 3, the lookup and the draft model in turn (both drafters' steps in one run)."""

    def __init__(self) -> None:
        self.steps = 0

    def reset(self) -> None:
        self.steps = 0

    def act(self, observation) -> Action:
        self.steps += 1
        return Action(3, drafter="ngram" if self.steps % 2 else "draft")

    def observe(self, result) -> None:
        pass


@pytest.fixture(scope="module")
def collected(tmp_path_factory):
    scenario = replace(
        load_scenario("code"), drafters=("draft", "ngram"), k_max=K_MAX, max_new_tokens=NEW_TOKENS
    )
    pair = scenario.pair.load()
    folder = tmp_path_factory.mktemp("vllm")
    collector = VLLMCollector(f"{__name__}:Alternating", max_num_seqs=4, folder=folder)
    traces = collector(pair, scenario, "test", prompts_per_domain=4, seed=0, progress=False)
    return scenario, traces


def test_every_recorded_step_replays_exactly_on_its_trace(collected):
    _, traces = collected
    recording = Path(traces.meta["vllm"]["recording"])
    agreement = json.loads((recording / AGREEMENT_FILE).read_text())
    assert len(read_requests(recording)) == len(traces) == 4
    by_drafter = agreement["by_drafter"]
    assert set(by_drafter) == {"ngram", "draft"} and agreement["token_mismatches"] == 0
    assert by_drafter["ngram"]["share"] == 1.0, agreement["disagreements"]
    # measured 1.0 on this run; a near-tie between the KV-cached and the teacher-forced draft
    # forwards would show here (experiments/vllm_prices.py reports the share on more requests)
    assert by_drafter["draft"]["share"] == 1.0, agreement["disagreements"]
    assert agreement["drafted_steps"] > 20


def test_the_traces_play_in_the_trace_replay_env_priced_by_vllms_own_steps(collected):
    scenario, traces = collected
    steps = read_served_steps(Path(traces.meta["vllm"]["recording"]) / STEPS_FILE)
    model = fit_serving_latency(steps, pair=traces.meta["pair"], device="vllm-cpu", k_max=K_MAX)
    print("serving fit, held-out error:", json.dumps(model.fit_error))
    env = TraceReplayEnv(scenario.with_overrides(split="test"), traces=traces, latency=model)
    for index, trace in enumerate(traces.traces):
        summary = run_episode(env, make_controller("tcp", K_MAX), seed=0, options={"trace_index": index})
        assert summary.tokens == trace.tokens and summary.seconds > 0
