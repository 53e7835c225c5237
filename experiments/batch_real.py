"""Batch-aware control in the real loop: continuous batching of the scenarios' test requests with
the embedded pair, every controller side by side, and the batch simulator's numbers next to them.

Each scenario's requests are drawn from its **test** prompts (``specrl.serving.scenario_requests``:
the same domains, weights and arrival process as the batch simulator), and served with
``specrl.serving.serve_continuous``: requests join the running batch when a row is free and leave
it when they finish; a fixed-batch scenario keeps its rows full while requests wait (2 requests
per row, at least 8, so that a batch of 64 runs in about a minute per controller). Time is the
batch's own device-synchronised work (steps and prefills), and requests arrive on that clock, so
every controller serves the same requests at the same arrival times; throughput is every
request's tokens over the busy seconds.

The batch-size schedule is tuned on **validation** in the batch simulator, as ``batch_sim.py``
tunes it (the same machine's latency model); the policy was chosen on validation there too. The
controllers run interleaved, repeat after repeat, and each ratio to the schedule is a median over
repeats of the ratios within a repeat. The simulator's column replays the **test** traces of the
same scenario (``batch_sim.py``'s episodes).

    python experiments/batch_real.py --policy specrl/policies/batch         # results/batch/real.*
    python experiments/batch_real.py --scenarios serving batch_4 --requests 6 --max-new-tokens 16 \
        --repeats 1 --episodes 1 --out /tmp/real                            # a smoke run
    python experiments/batch_real.py --policy specrl/policies/batch --scenarios batch_64 --static 1 2 \
        --only plain schedule static:1 static:2 ppo --repeats 5 --out results/batch/real_b64_static
    python experiments/batch_real.py --policy runs/batch_seed0 runs/batch_seed1 runs/batch_seed2 \
        --only ppo+cutoff --out results/batch/real_seeds    # training seeds side by side, one run

With several policies (training seeds, say) their rows are ``ppo:FOLDER`` and ``ppo:FOLDER+cutoff``,
each with its own cut-off; ``--only ppo`` or ``ppo+cutoff`` picks that row of every policy.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from tqdm.auto import tqdm  # noqa: E402

import specrl  # noqa: E402
from specrl.batch_control import (  # noqa: E402
    FIXED,
    SERVING,
    controller_throughput,
    tune_cutoff,
    tune_schedule,
    with_cutoff,
)
from specrl.batch_control.schedule import cutoff_sentence  # noqa: E402
from specrl.controllers.batch_schedule import BatchScheduleController  # noqa: E402
from specrl.engine.sampling import SamplingConfig  # noqa: E402
from specrl.envs import load_scenario  # noqa: E402
from specrl.envs.batch_replay import BatchReplayEnv, scenario_batch_latency  # noqa: E402
from specrl.evaluation.compare import paired_ratio  # noqa: E402
from specrl.evaluation.machine import origin_line, result_origin  # noqa: E402
from specrl.io import write_report  # noqa: E402
from specrl.plots import save_figure  # noqa: E402
from specrl.serving import scenario_requests, serve_continuous  # noqa: E402
from specrl.tables import markdown_table  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", default=[*SERVING, *FIXED], help="scenarios to serve")
    parser.add_argument(
        "--requests",
        type=int,
        help="requests per scenario (default: a serving scenario's own; a fixed batch: 2 a row, >= 8)",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, help="tokens per request (default: each scenario's own)"
    )
    parser.add_argument("--repeats", type=int, default=2, help="interleaved repeats per controller")
    parser.add_argument(
        "--fixed-repeats",
        type=int,
        help="repeats of the fixed-batch scenarios (default: --repeats); they run in seconds, so more "
        "repeats buy them a steadier median cheaply",
    )
    parser.add_argument(
        "--episodes", type=int, default=3, help="simulator episodes (tuning and the sim column)"
    )
    parser.add_argument(
        "--policy", nargs="+", default=[], metavar="FOLDER", help="exported policy folders to compare too"
    )
    parser.add_argument(
        "--static", nargs="*", type=int, default=[], metavar="K", help="static-k rows to add (static:K)"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="ROW",
        help="run these rows only (plain and schedule always run: the ratios are to them)",
    )
    parser.add_argument("--out", default=str(REPO / "results" / "batch" / "real"), help="output stem")
    args = parser.parse_args(argv)
    names = [Path(folder).name for folder in args.policy]
    if len(set(names)) < len(names):
        parser.error(f"--policy: the folders' names label the rows, so they must differ: {names}")
    if args.only is not None:
        known = {"plain", "schedule", "tcp", "hf-heuristic", *(f"static:{k}" for k in args.static)}
        labels = policy_labels(args.policy)
        known |= {"ppo", "ppo+cutoff", *labels, *(f"{label}+cutoff" for label in labels)} if labels else set()
        unknown = sorted(set(args.only) - known)
        if unknown:
            parser.error(f"--only {' '.join(unknown)}: no such row; the rows are {sorted(known)}")
    return args


def policy_labels(folders: list[str]) -> list[str]:
    """Row labels of the policies: ``ppo`` for one, ``ppo:FOLDER`` (its folder's name) for several."""
    if len(folders) == 1:
        return ["ppo"]
    return [f"ppo:{Path(folder).name}" for folder in folders]


def chosen_row(label: str, only: list[str], roster: dict) -> bool:
    """Whether ``--only`` picks ``label``: by name, or ``ppo`` / ``ppo+cutoff`` for every policy's
    (a policy with no cut-off, never slower than plain decoding, serves as it is: its own row)."""
    if label in {"plain", "schedule", *only}:
        return True
    if label.startswith("ppo:") and ("ppo+cutoff" if label.endswith("+cutoff") else "ppo") in only:
        return True
    uncut = label.startswith("ppo") and not label.endswith("+cutoff") and f"{label}+cutoff" not in roster
    return uncut and ("ppo+cutoff" in only or f"{label}+cutoff" in only)


def controllers(
    schedule: dict[int, int],
    policies: dict[str, specrl.LearnedController],
    cutoffs: dict[str, int | None],
    statics: list[int] = (),
    only: list[str] | None = None,
) -> dict:
    """The roster: plain, the schedule, the rules, static k, and each policy (label -> controller)
    with and, where it has a cut-off, without speculation above it."""
    chosen = {
        "plain": specrl.StaticController(0),
        "schedule": BatchScheduleController(schedule),
        "tcp": specrl.TCPController(),
        "hf-heuristic": specrl.HFHeuristicController(),
        **{f"static:{k}": specrl.StaticController(k) for k in statics},
    }
    for label, policy in policies.items():
        chosen = with_cutoff({**chosen, label: policy}, cutoffs[label], label)
    if only is not None:
        chosen = {label: c for label, c in chosen.items() if chosen_row(label, only, chosen)}
    return chosen


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    first = load_scenario(FIXED[0])
    pair = first.pair.load()
    latency = scenario_batch_latency(first, pair)
    validation = {
        name: BatchReplayEnv(name, latency=latency, split="validation", pair=pair) for name in FIXED
    }
    best_k, schedule = tune_schedule(validation, args.episodes)
    print(f"schedule tuned on validation (simulator): {schedule}", flush=True)
    policies = {
        label: specrl.LearnedController.load(folder)
        for label, folder in zip(policy_labels(args.policy), args.policy, strict=True)
    }
    cutoffs = {label: tune_cutoff(validation, policy, args.episodes) for label, policy in policies.items()}
    roster = controllers(schedule, policies, cutoffs, args.static, args.only)

    rows = {}
    for name in args.scenarios:
        scenario = load_scenario(name)
        spec = scenario.batch
        capacity = spec.max_size if spec.serving else spec.size
        count = args.requests or (spec.requests if spec.serving else max(8, 2 * spec.size))
        requests = scenario_requests(scenario, pair, "test", seed=0, count=count)
        sampling = SamplingConfig(scenario.sampling.temperature)
        budget = args.max_new_tokens or scenario.max_new_tokens
        env = BatchReplayEnv(name, latency=latency, split="test", pair=pair)
        simulated = {label: controller_throughput(env, c, args.episodes) for label, c in roster.items()}
        measured: dict[str, list[float]] = {label: [] for label in roster}
        outputs: dict[str, list[list[int]]] = {}
        traces: dict[str, dict] = {}
        repeats = args.repeats if spec.serving or args.fixed_repeats is None else args.fixed_repeats
        for repeat in range(repeats):
            # every other repeat runs the roster backwards, so a drift of the machine's speed
            # within a repeat favours no controller
            order = list(roster.items())[:: 1 if repeat % 2 == 0 else -1]
            for label, controller in tqdm(order, desc=f"{name}, repeat {repeat + 1}/{repeats}"):
                run = serve_continuous(pair, controller, requests, capacity, budget, sampling, seed=repeat)
                measured[label].append(run.tokens_per_s)
                outputs.setdefault(label, run.outputs)
                traces[label] = {"batch_sizes": run.batch_sizes, "ks": run.ks}
        same = all(outputs[label] == outputs["plain"] for label in roster) if sampling.greedy else None
        ratios = {label: paired_ratio(values, measured["schedule"]) for label, values in measured.items()}
        to_plain = {label: paired_ratio(values, measured["plain"]) for label, values in measured.items()}
        rows[name] = {
            "batch": {
                "capacity": capacity,
                "serving": spec.serving,
                "requests": len(requests),
                "max_new_tokens": budget,
            },
            "repeats": repeats,
            "tokens_per_s": measured,
            "median_tokens_per_s": {label: statistics.median(v) for label, v in measured.items()},
            "ratio_vs_schedule": ratios,
            "ratio_vs_plain": to_plain,
            "sim_tokens_per_s": simulated,
            "sim_ratio_vs_schedule": {label: v / simulated["schedule"] for label, v in simulated.items()},
            "outputs_equal_plain": same,
            "last_repeat": traces,
        }
        print(f"{name}: real ratio vs schedule {ratios}", flush=True)
    report = {
        "rows": rows,
        "schedule": schedule,
        "best_k_validation": best_k,
        "cutoffs": cutoffs,
        "repeats": args.repeats,
        "policy": args.policy[0] if len(args.policy) == 1 else args.policy,
        **result_origin(pair),
    }
    out = Path(args.out)
    write_report(out, report, markdown(report, out.with_suffix(".png").name))
    plot(report, out.with_suffix(".png"))
    print(markdown(report, out.with_suffix(".png").name))
    return report


def markdown(report: dict, picture: str) -> str:
    labels = list(next(iter(report["rows"].values()))["tokens_per_s"])
    others = [label for label in labels if label != "schedule"]
    lines = [
        "# Batch-aware control in the real loop (continuous batching, test prompts)",
        "",
        f"Tokens per busy second, median over {_repeats(report)} interleaved repeats (every other one "
        "runs the controllers in reverse order), with the embedded pair's real decoding loop; requests "
        "arrive on the batch's own clock (its measured work, prefill included) and join the batch when "
        "a row is free. Ratios are medians of the ratios within a repeat; `sim` is the batch simulator "
        "on the same scenario's test traces. The schedule was tuned on validation "
        f"in the simulator: best k per batch size {report['best_k_validation']} -> "
        f"`{report['schedule']}`.{cutoff_sentence(report)}",
        "",
    ]
    header = [
        "scenario",
        "rows",
        *labels,
        *[f"{label} / schedule (sim)" for label in others],
        *[f"{label} / plain" for label in labels if label != "plain"],
        "outputs equal",
    ]
    table = []
    for name, row in report["rows"].items():
        batch = row["batch"]
        rows_text = f"up to {batch['capacity']}" if batch["serving"] else str(batch["capacity"])
        same = row["outputs_equal_plain"]
        table.append(
            [
                name,
                f"{rows_text} ({batch['requests']} requests)",
                *[f"{row['median_tokens_per_s'][label]:.0f}" for label in labels],
                *[
                    f"{row['ratio_vs_schedule'][label]:.3f} ({row['sim_ratio_vs_schedule'][label]:.3f})"
                    for label in others
                ],
                *[_ratio(row, "ratio_vs_plain", label) for label in labels if label != "plain"],
                "-" if same is None else ("yes" if same else "**no**"),
            ]
        )
    lines += [markdown_table(header, table), "", f"![ratios and k by batch size]({picture})", ""]
    lines += [
        origin_line(report),
        "",
    ]
    return "\n".join(lines)


def _repeats(report: dict) -> str:
    """The report's repeats: "2", or "4 (serving) and 8 (fixed batches)"."""
    by_kind: dict[bool, set[int]] = {True: set(), False: set()}
    for row in report["rows"].values():
        by_kind[row["batch"]["serving"]].add(row.get("repeats", report["repeats"]))
    every = by_kind[True] | by_kind[False]
    if len(every) == 1:
        return str(every.pop())
    serving, fixed = ("/".join(map(str, sorted(by_kind[kind]))) for kind in (True, False))
    return f"{serving} (serving) and {fixed} (fixed batches)"


def _ratio(row: dict, key: str, label: str) -> str:
    """A paired ratio of the table, or "-" in a report written before it was kept."""
    value = row.get(key, {}).get(label)
    return "-" if value is None else f"{value:.3f}"


def plot(report: dict, path: Path) -> None:
    """Left: each controller's real ratio to the schedule per scenario (and the simulator's, hollow).
    Right: the mean k each controller chose at each batch size, in the serving scenario."""
    rows = report["rows"]
    every = list(next(iter(rows.values()))["tokens_per_s"])
    color = {label: plt.get_cmap("tab10")(i) for i, label in enumerate(every)}
    labels = [label for label in every if label != "schedule"]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = list(rows)
    width = 0.8 / len(labels)
    for i, label in enumerate(labels):
        xs = [j + (i - (len(labels) - 1) / 2) * width for j in range(len(names))]
        left.bar(
            xs, [rows[n]["ratio_vs_schedule"][label] for n in names], width, label=label, color=color[label]
        )
        left.scatter(
            xs,
            [rows[n]["sim_ratio_vs_schedule"][label] for n in names],
            color="k",
            marker="o",
            facecolors="none",
            s=18,
            zorder=3,
        )
    left.axhline(1.0, color="gray", lw=0.8)
    left.set_xticks(range(len(names)), names)
    left.set_ylabel("tokens/s / schedule's (bars: real, circles: simulator)")
    left.legend(fontsize=8)
    serving = next((n for n in names if rows[n]["batch"]["serving"]), names[0])
    for label, trace in rows[serving]["last_repeat"].items():
        by_size: dict[int, list[int]] = {}
        for size, k in zip(trace["batch_sizes"], trace["ks"], strict=True):
            by_size.setdefault(size, []).append(k)
        sizes = sorted(by_size)
        right.plot(
            sizes, [statistics.mean(by_size[s]) for s in sizes], marker=".", label=label, color=color[label]
        )
    right.set_xscale("log", base=2)
    right.set_xlabel(f"rows in the batch ({serving})")
    right.set_ylabel("mean k chosen")
    right.legend(fontsize=8)
    figure.tight_layout()
    save_figure(figure, path)


if __name__ == "__main__":
    main()
