"""Scale-out on Ray: sharding, errors within seconds, and results equal to a single process.

Runs against a private local Ray instance (two CPUs, started once for the module) on the embedded
tiny pair: trace collection and the evaluation's real loop (modeled time) give the same results
sharded across two workers as in this process; a worker that dies once is replaced and its shard
retried; one that dies twice fails the run naming the prompts lost.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

from specrl.cli import main
from specrl.distributed import RayError, RayPool, WorkerLost, connect, shards
from specrl.distributed.cluster import LOCAL, probe
from specrl.distributed.workers import PairWorker
from specrl.envs import load_scenario
from specrl.envs.recording import cached_traces, collect_traces
from specrl.evaluation import Settings
from specrl.evaluation.run_all import evaluate_all, write_results
from specrl.evaluation.scenario_choice import Overrides, choose_scenarios
from specrl.export.layout import SHIPPED_POLICY_DIR

ray = pytest.importorskip("ray", reason="Ray is the optional extra specrl[ray] (the dev extra has it)")
pytestmark = pytest.mark.xdist_group("ray")  # one pytest worker runs them all, on one local Ray instance


def test_shards_are_contiguous_balanced_and_join_back_in_order():
    jobs = list(range(10))
    parts = shards(jobs, 3)
    assert [len(p) for p in parts] == [4, 3, 3]
    assert [j for p in parts for j in p] == jobs
    assert shards(jobs[:2], 5) == [[0], [1]]  # never an empty shard
    assert shards([], 4) == [[]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on exit: nothing listens there


def test_an_address_that_does_not_answer_is_refused_within_seconds():
    start = time.perf_counter()
    with pytest.raises(RayError, match="no Ray cluster answers at 127.0.0.1"):
        connect(f"127.0.0.1:{free_port()}")  # nothing listens: refused at once
    assert time.perf_counter() - start < 2
    with pytest.raises(RayError, match="is not HOST:PORT"):
        probe("localhost")


@pytest.mark.slow  # Ray gives up after about 3 s
def test_an_address_where_no_ray_cluster_runs_is_refused_within_seconds(monkeypatch):
    monkeypatch.delenv("RAY_NUM_REDIS_GET_RETRIES", raising=False)
    # A process here that accepts the connection but is no Ray cluster (what a proxy or another
    # service on the port does): the TCP probe passes, Ray's own attempts are bounded.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        start = time.perf_counter()
        with pytest.raises(RayError, match="could not join a Ray cluster at 127.0.0.1"):
            connect(f"127.0.0.1:{server.getsockname()[1]}")
        assert time.perf_counter() - start < 10
    assert not ray.is_initialized()


def test_missing_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(RayError, match=r"pip install 'specrl\[ray\]'"):
        connect("local")


@pytest.fixture(scope="module")
def local_ray(tiny_home):
    """A private Ray instance of two CPUs; its workers inherit SPECRL_HOME (the tiny pair's)."""
    home, pair = tiny_home
    os.environ["RAY_DEDUP_LOGS"] = "0"
    connect("local", num_cpus=2)
    yield home, pair
    ray.shutdown()


def scenarios(pair_name: str = "tiny"):
    code = load_scenario("code").with_overrides(preset=pair_name)
    shift = load_scenario("code_to_math_t1").with_overrides(preset=pair_name)  # sampled draws, two segments
    return code, shift


def assert_same_traces(ours, theirs) -> None:
    assert ours.arrays.keys() == theirs.arrays.keys()
    for name, values in ours.arrays.items():
        np.testing.assert_array_equal(values, theirs.arrays[name], err_msg=name)
    assert {k: v for k, v in ours.meta.items() if k != "created"} == {
        k: v for k, v in theirs.meta.items() if k != "created"
    }


@pytest.mark.slow  # a local Ray instance and two workers loading the pair: ~20 s
def test_ray_collection_equals_single_process_collection(local_ray):
    _, pair = local_ray
    pool = RayPool(pair_spec := scenarios()[0].pair, workers=2)
    assert pair_spec.preset == "tiny"
    collect = pool.collector()
    for scenario in scenarios():
        here = collect_traces(pair, scenario, "test", prompts_per_domain=3, seed=5, progress=False)
        there = collect(pair, scenario, "test", prompts_per_domain=3, seed=5, progress=False)
        assert len(there) == 3 * len([d for d, w in scenario.prompts.domains.items() if w > 0])
        assert_same_traces(there, here)
    assert len(set(pool.where())) == 2  # two processes, each holding the pair
    pool.close()


class DiesOnce(PairWorker):
    """Exits the process the first time it records a shard holding prompt 1 (a marker file
    remembers across processes); with ``always``, every time."""

    marker = ""
    always = False

    def record(self, jobs, *args):
        if any(job.prompt_index == 1 for job in jobs) and (self.always or not os.path.exists(self.marker)):
            Path(self.marker).touch()
            os._exit(1)
        return super().record(jobs, *args)


def worker_class(tmp_path: Path, always: bool) -> type:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    return type("Dies", (DiesOnce,), {"marker": str(tmp_path / "died"), "always": always})


@pytest.mark.slow  # workers die and are replaced: ~25 s
def test_a_dead_worker_is_replaced_and_its_shard_retried_once_then_the_run_fails_naming_the_prompts(
    local_ray, tmp_path
):
    _, pair = local_ray
    code, _ = scenarios()
    expected = collect_traces(pair, code, "test", prompts_per_domain=4, seed=0, progress=False)
    pool = RayPool(code.pair, workers=2, worker=worker_class(tmp_path, always=False))
    retried = pool.collector()(pair, code, "test", prompts_per_domain=4, seed=0, progress=False)
    assert (tmp_path / "died").exists()  # a worker did die
    assert_same_traces(retried, expected)
    pool.close()

    pool = RayPool(code.pair, workers=2, worker=worker_class(tmp_path, always=True))
    with pytest.raises(WorkerLost, match="died twice on shard 1/2") as lost:
        pool.collector()(pair, code, "test", prompts_per_domain=4, seed=0, progress=False)
    assert lost.value.prompts == ["code#0", "code#1"]
    pool.close()


@pytest.mark.slow  # two tiny evaluation runs and a Ray pool: ~40 s
def test_evaluate_on_ray_equals_the_single_process_run_and_collect_traces_caches_what_ray_recorded(
    local_ray, tmp_path
):
    home, _ = local_ray
    overrides = Overrides(max_new_tokens=40, latency="constant", preset="tiny", device="cpu")
    scenarios = choose_scenarios(["code"], "test", overrides)
    settings = Settings(
        episodes=3, sim_prompts_per_domain=3, repeats=2, warmup=0, hf=False, time="modeled", progress=False
    )
    config = json.loads(json.dumps(asdict(settings)))  # the page reads the workload and timing here
    header = {"date": "2026-01-01T00:00:00+00:00", "command": "evaluate", "config": config}
    here = evaluate_all(scenarios, settings, [SHIPPED_POLICY_DIR / "default"], header)
    pool = RayPool(scenarios[0].pair, address=LOCAL, workers=2)  # what evaluate.py --ray makes
    there = evaluate_all(
        scenarios, settings, [SHIPPED_POLICY_DIR / "default"], header, pool=pool, ray_address=LOCAL
    )
    pool.close()
    write_results(there, tmp_path / "there")
    ours, theirs = here["scenarios"]["code"]["rows"], there["scenarios"]["code"]["rows"]
    assert ours.keys() == theirs.keys() and len(ours) > 5
    assert ours["plain"]["real"]["tokens_per_s"] > 0 and ours["tcp"]["real"]["tokens_per_s"] > 0
    for name in ours:
        assert theirs[name]["real"] == ours[name]["real"], name
    assert len(there["machine"]["ray"]["workers"]) == 2
    assert "Ray workers" in (tmp_path / "there" / "results.md").read_text()

    # specrl collect --ray records into this process's cache, as without Ray
    main(
        [
            "collect",
            "--preset",
            "tiny",
            "--scenarios",
            "prose",
            "--split",
            "validation",
            "--prompts-per-domain",
            "2",
            "--ray",
        ]
    )
    prose = load_scenario("prose").with_overrides(preset="tiny")
    cached = cached_traces(prose, "validation", prose.pair.info(), prompts_per_domain=2, progress=False)
    assert cached.source != "<memory>" and len(cached) == 2
