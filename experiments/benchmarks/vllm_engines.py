"""``bench_vllm.py``'s engines: each vLLM engine setting serves its workloads in a process of its own
(the script run with ``--worker``), and the settings take turns, a new seeded order each repeat
(:func:`interleaved`), keeping every finished run so an interrupted bench resumes."""

from __future__ import annotations

import hashlib
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: The script whose ``--worker`` runs one engine.
SCRIPT = Path(__file__).resolve().parent.parent / "bench_vllm.py"
FIXED = (1, 4, 16, 64)
ARRIVALS = "arrivals"
CHAT = "chat"  # requests sharing a system prompt
MAX_ROWS = 64  # the arrivals scenario's batch limit


def serve(
    llm: Any,
    requests: Sequence[tuple[Sequence[int], float]],
    limit: int,
    max_new_tokens: int,
) -> dict[str, Any]:
    """Serve ``requests`` ((prompt token ids, arrival on the busy clock), in arrival order) greedily
    with at most ``limit`` running; every request generates ``max_new_tokens`` (EOS ignored). The
    clock advances by the engine's measured steps and jumps to the next arrival when nothing runs,
    as :func:`specrl.serving.serve_continuous` serves specrl's own engine.

    Returns tokens, busy seconds, tokens per busy second, TPOT p50 and p99 over requests, the mean
    batch, the engine steps, the outputs (token ids per request) and the speculative summary."""
    from vllm import SamplingParams

    from specrl.vllm.serve import spec_counters, spec_summary

    engine = llm.llm_engine
    params = SamplingParams(temperature=0.0, max_tokens=max_new_tokens, ignore_eos=True)
    before = spec_counters(llm)
    clock = busy = 0.0
    waiting, running = 0, 0
    first: dict[int, float] = {}
    finished: dict[int, float] = {}
    outputs: dict[int, list[int]] = {}
    batches: list[int] = []
    while waiting < len(requests) or running:
        if not running:
            clock = max(clock, requests[waiting][1])  # an idle engine waits for the next arrival
        while waiting < len(requests) and running < limit and requests[waiting][1] <= clock:
            engine.add_request(str(waiting), {"prompt_token_ids": list(requests[waiting][0])}, params)
            waiting, running = waiting + 1, running + 1
        batches.append(running)
        start = time.perf_counter()
        step = engine.step()
        spent = time.perf_counter() - start
        clock, busy = clock + spent, busy + spent
        for output in step:
            index = int(output.request_id)
            tokens = output.outputs[0].token_ids
            if tokens and index not in first:
                first[index] = clock
            if output.finished:
                finished[index], outputs[index] = clock, list(tokens)
                running -= 1
    tokens = sum(len(o) for o in outputs.values())
    tpot = [(finished[i] - first[i]) / (len(outputs[i]) - 1) for i in outputs if len(outputs[i]) > 1]
    return {
        "tokens": tokens,
        "busy_seconds": busy,
        "tokens_per_s": tokens / busy if busy else 0.0,
        "tpot_p50": statistics.median(tpot) if tpot else None,
        "tpot_p99": statistics.quantiles(tpot, n=100)[98] if len(tpot) > 1 else None,
        "mean_batch": statistics.fmean(batches) if batches else 0.0,
        "steps": len(batches),
        "outputs": [outputs[i] for i in range(len(requests))],
        "spec": spec_summary(before, spec_counters(llm)),
    }


def proposer_counts(proposer) -> dict[str, dict]:
    """What specrl's ``proposer`` counted so far: its seconds, and per draft length (as text: JSON
    keys) the drafts vLLM verified and the tokens it accepted of them."""
    stats = proposer.stats
    return {
        "proposer_seconds": dict(proposer.seconds),
        "drafts_by_length": {str(m): n for m, n in stats.drafts.items()},
        "accepted_by_length": {str(m): n for m, n in stats.accepted.items()},
    }


def worker(path: str) -> None:
    """Serve every workload of the job file with one engine; write the results next to it."""
    job = json.loads(Path(path).read_text())
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM

    from specrl.vllm.collect import cpu_cache
    from specrl.vllm.compat import require_vllm

    require_vllm()
    llm = LLM(
        model=job["target"],
        max_model_len=1024,
        max_num_seqs=MAX_ROWS,
        seed=0,
        dtype="float32",
        **cpu_cache(),
        speculative_config=job["speculative"],
        additional_config=job.get("additional") or {},
        disable_log_stats=False,
    )
    serve(llm, [(job["workloads"][0]["requests"][0][0], 0.0)], 1, 8)  # warm-up
    from specrl.vllm.proposer import LIVE

    results: dict[str, list] = {w["name"]: [] for w in job["workloads"]}
    for _ in range(job["repeats"]):
        for workload in job["workloads"]:
            proposer = next(iter(LIVE), None)  # specrl's proposer, in this process when it serves
            before = proposer and proposer_counts(proposer)
            run = serve(llm, workload["requests"], workload["limit"], job["max_new_tokens"])
            after = proposer and proposer_counts(proposer)
            for key in ("proposer_seconds", "drafts_by_length", "accepted_by_length"):
                run[key] = {k: v - before[key].get(k, 0) for k, v in after[key].items()} if proposer else None
            results[workload["name"]].append(run)
    Path(path).with_suffix(".out.json").write_text(json.dumps(results))


def run_engine(label: str, job: dict) -> dict[str, list]:
    """One engine setting's runs (a subprocess of ``bench_vllm.py``), with progress on stderr."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "job.json"
        path.write_text(json.dumps(job))
        env = dict(os.environ)
        env.update(job.get("process_env", {}))
        print(f"[bench_vllm] {label} ...", file=sys.stderr, flush=True)
        done = subprocess.run(
            [sys.executable, str(SCRIPT), "--worker", str(path)], env=env, capture_output=True, text=True
        )
        if done.returncode:
            raise RuntimeError(f"the engine '{label}' failed:\n{done.stderr[-4000:]}")
        return json.loads(path.with_suffix(".out.json").read_text())


def interleaved(
    jobs: dict[str, dict], repeats: int, stage: str, done: Path | None = None, seed: int = 0
) -> dict[str, dict[str, list]]:
    """Every job's runs by workload: each repeat starts every job's engine once, serving each of its
    workloads once, the jobs in a new seeded order, so the machine's drift within the bench falls
    on every engine alike and the ratio within a repeat pairs runs minutes apart, not an hour.

    ``done`` keeps every finished engine run (under its stage, repeat and job), written atomically
    after each: an interrupted bench started again with the same settings resumes there."""
    from specrl.io import write_text_atomic

    kept = json.loads(done.read_text()) if done is not None and done.is_file() else {}
    order, shuffle = list(jobs), random.Random(seed)
    runs: dict[str, dict[str, list]] = {label: {} for label in jobs}
    for repeat in range(repeats):
        shuffle.shuffle(order)
        for label in order:
            job = {**jobs[label], "repeats": 1}
            digest = hashlib.sha256(json.dumps(job, sort_keys=True).encode()).hexdigest()[:16]
            key = f"{stage} {repeat} {label} {digest}"
            if key not in kept:
                kept[key] = run_engine(f"{stage} {repeat + 1}/{repeats}: {label}", job)
                if done is not None:
                    write_text_atomic(done, json.dumps(kept))
            for workload, results in kept[key].items():
                runs[label].setdefault(workload, []).extend(results)
    return runs


def vllm_static(method: str, k: int, draft: str) -> dict:
    """vLLM's own speculation by ``method`` at a static k (the lookup's orders are the proposer's)."""
    spec = {"method": method, "num_speculative_tokens": k}
    if method == "ngram":
        return spec | {"prompt_lookup_min": 1, "prompt_lookup_max": 3}
    return spec | {"model": draft}


def specrl_rows(
    policies: list[str],
    draft: str,
    lookup_only: bool = False,
    max_new_tokens: int | None = None,
    tcp_draft: bool = True,
) -> dict[str, dict]:
    """specrl's proposer rows, each its ``additional_config["specrl"]``: TCP (unless not
    ``tcp_draft``) and every policy with the draft model, and TCP with the n-gram lookup alone (no
    draft model); with ``lookup_only``, TCP and every policy with the lookup alone.
    ``max_new_tokens``: the requests' budget, which vLLM does not tell a proposer (the policies'
    progress feature reads it)."""
    names = ["tcp", *policies]
    drafting = names if tcp_draft else policies
    rows = {}
    if not lookup_only:
        rows = {f"specrl {name}": {"controller": name, "draft": draft} for name in drafting}
    for name in names if lookup_only else ["tcp"]:
        rows[f"specrl {name}, lookup"] = {"controller": name}
    budget = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    return {label: settings | budget for label, settings in rows.items()}


def policy_version(controller: str) -> str | None:
    """What identifies the policy ``controller`` names: a digest of its ``metadata.json``, which
    holds its files' checksums (a retrained policy under the same name is another job of the
    resume file); None for a rule or a controller class."""
    from specrl.export.layout import METADATA_FILE, policy_folder

    metadata = policy_folder(controller) / METADATA_FILE
    if not metadata.is_file():
        return None
    return hashlib.sha256(metadata.read_bytes()).hexdigest()[:16]


def intel_openmp() -> str | None:
    """The Intel OpenMP library vLLM's CPU build installs (``intel-openmp``), if present."""
    for folder in (Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"):
        if (folder / "libiomp5.so").is_file():
            return str(folder / "libiomp5.so")
    return None
