"""``bench_vllm.py``'s workloads and arithmetic: the requests served, vLLM's k and schedule and
specrl's cut-offs chosen on validation, specrl's own engine without speculation, and the summary of
the test runs (medians, paired ratios to no speculation with their 95% interval)."""

from __future__ import annotations

from statistics import median

from benchmarks.vllm_engines import ARRIVALS, FIXED, MAX_ROWS


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
