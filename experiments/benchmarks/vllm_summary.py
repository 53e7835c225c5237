"""``bench_vllm.py``'s workloads and arithmetic: the requests served, vLLM's k and schedule and
specrl's cut-offs chosen on validation, specrl's own engine without speculation, and the summary of
the test runs (medians, paired ratios to no speculation with their 95% interval)."""

from __future__ import annotations

from collections import Counter
from statistics import median

from benchmarks.vllm_engines import ARRIVALS, CHAT, FIXED, MAX_ROWS

SYSTEM_TOKENS = 200  # the chat workload's shared system prompt
CHAT_REQUESTS, CHAT_ROWS = 32, 16
METHODS = ("ngram", "draft_model")


def workloads(pair, split: str, requests: int, seed: int = 0, batches: tuple[int, ...] = FIXED) -> list[dict]:
    """The arrivals scenario's requests, the fixed ``batches`` and the chat workload, as token ids
    (and arrival times)."""
    from specrl.envs import load_scenario
    from specrl.serving.continuous import scenario_requests

    scenario = load_scenario(ARRIVALS)  # its load is relative to this machine's plain capacity
    timed = scenario_requests(scenario, pair, split, seed, requests, scenario.latency_model(pair))
    arrivals = {
        "name": f"{split} {ARRIVALS}",
        "limit": MAX_ROWS,
        "requests": [(r.prompt_ids, r.arrival) for r in timed],
    }
    return [arrivals, *fixed_workloads(pair, split, batches, seed), chat_workload(pair, split, seed)]


def fixed_workloads(pair, split: str, batches: tuple[int, ...], seed: int = 0) -> list[dict]:
    """Per batch size B, 2 B requests (at least 8) of the ``batch_B`` scenario (the arrivals'
    domains), B running."""
    from specrl.envs import load_scenario
    from specrl.serving.continuous import scenario_requests

    found = []
    for rows in batches:
        scenario = load_scenario(f"batch_{rows}")
        fixed = scenario_requests(scenario, pair, split, seed + rows, max(8, 2 * rows))
        found.append(
            {"name": f"{split} B={rows}", "limit": rows, "requests": [(r.prompt_ids, 0.0) for r in fixed]}
        )
    return found


def chat_workload(pair, split: str, seed: int = 0) -> dict:
    """:data:`CHAT_REQUESTS` requests, each a shared system prompt of :data:`SYSTEM_TOKENS` tokens
    (the first prompt, repeated to that length) then its own prompt, :data:`CHAT_ROWS` running."""
    from specrl.envs import load_scenario
    from specrl.serving.continuous import scenario_requests

    asks = scenario_requests(load_scenario(f"batch_{CHAT_ROWS}"), pair, split, seed + 1000, CHAT_REQUESTS + 1)
    system = list(asks[0].prompt_ids)
    while len(system) < SYSTEM_TOKENS:
        system += list(asks[0].prompt_ids)
    chat = [(system[:SYSTEM_TOKENS] + list(r.prompt_ids), 0.0) for r in asks[1:]]
    return {"name": f"{split} {CHAT}", "limit": CHAT_ROWS, "requests": chat}


def tune(
    runs: dict[str, dict[str, list]], ks: list[int], batches: tuple[int, ...] = FIXED
) -> tuple[dict[str, int], dict[str, list[list[int]]]]:
    """Each vLLM method's best static k on validation arrivals, and each method's own schedule by
    batch size (``num_speculative_tokens_per_batch_size``): per fixed batch size of ``batches`` its best k of
    {0} + ``ks`` on validation (medians over repeats), made a schedule as the batch simulator's is
    (:func:`schedule_from_best_k`)."""
    from specrl.batch_control.schedule import schedule_from_best_k

    chosen = {
        method: max(ks, key=lambda k: rate(runs, f"vLLM {method} k={k}", ARRIVALS)) for method in METHODS
    }
    schedules = {}
    for method in METHODS:
        best = {}
        for rows in batches:
            options = {0: rate(runs, "no speculation", f"B={rows}")} | {
                k: rate(runs, f"vLLM {method} k={k}", f"B={rows}") for k in ks
            }
            best[rows] = max(options, key=options.get)
        schedules[method] = vllm_schedule(schedule_from_best_k(best))
    return chosen, schedules


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


def cutoff(runs: dict[str, dict[str, list]], label: str, batches: tuple[int, ...] = FIXED) -> int | None:
    """The largest batch at which ``label`` speculates, from its validation throughput over no
    speculation's at each fixed batch of ``batches``, as the batch simulator tunes it (:func:`cutoff_from`);
    None where it is never slower."""
    from specrl.batch_control.schedule import cutoff_from

    return cutoff_from(
        {rows: rate(runs, label, f"B={rows}") / rate(runs, "no speculation", f"B={rows}") for rows in batches}
    )


def own_engine(pair, test: list[dict], max_new_tokens: int, repeats: int) -> dict[str, list[float]]:
    """specrl's own batched engine without speculation on the fixed-batch test workloads."""
    from specrl.controllers import StaticController
    from specrl.serving.continuous import TimedRequest, serve_continuous

    rates: dict[str, list[float]] = {}
    for _ in range(repeats):
        for workload in test[1:-1]:  # the fixed batches
            requests = [TimedRequest(prompt, 0.0) for prompt, _ in workload["requests"]]
            run = serve_continuous(
                pair, StaticController(0), requests, workload["limit"], max_new_tokens, stop_at_eos=False
            )
            rates.setdefault(workload["name"].removeprefix("test "), []).append(run.tokens_per_s)
    return rates


def acceptance_by_length(runs: list[dict]) -> dict[str, float] | None:
    """Per draft length of specrl's proposer, over ``runs``: the share of its drafts' tokens vLLM
    accepted; None for vLLM's own speculation (its counters are per position only)."""
    if not runs[0].get("drafts_by_length"):
        return None
    drafts, accepted = Counter(), Counter()
    for run in runs:
        drafts.update(run["drafts_by_length"])
        accepted.update(run["accepted_by_length"])
    return {m: accepted[m] / (int(m) * n) for m, n in sorted(drafts.items(), key=lambda kv: int(kv[0])) if n}


def summarise(runs, own, chosen, schedules, args) -> dict:
    """Per test workload and engine: medians and ratios to no speculation, and the equality of
    outputs with it (greedy: they must be equal)."""
    from specrl.evaluation.compare import paired_ratio
    from specrl.evaluation.intervals import paired_ratio_interval

    names = [ARRIVALS, *(f"B={rows}" for rows in args.fixed_batches), CHAT]
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
                "acceptance_by_length": acceptance_by_length(mine),
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
        "dynamic_schedule": schedules,
        "own_engine": engine_rows,
        "settings": {
            "requests": args.requests,
            "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats,
            "validation_repeats": args.validation_repeats,
            "fixed_batches": list(args.fixed_batches),
            "interleaved": True,
            "static_k": args.static_k,
            "policies": args.policy,
            "k_max": args.k_max,
        },
    }
