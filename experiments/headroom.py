"""How much room an adaptive controller has over the best static setting, on test traces.

Three bounds in hindsight, in the simulator (modeled time, the calibrated latency model), each
over the same traces and acceptance draws:

- **per scenario**: the best static ``(k, tau)`` for the whole scenario (what
  ``specrl.oracle.best_static`` reports, the bar of every comparison);
- **per prompt**: the best static ``(k, tau)`` of each prompt on its own, as if a controller knew
  at the first step which setting suits the prompt. The gain over the first is what telling
  prompts (and domains) apart can buy;
- **per step (clairvoyant)**: the best ``k`` at every step knowing which draft tokens will be
  accepted (``specrl.oracle.clairvoyant_bound``). The gain over the second needs knowing, within
  a prompt, which token the target will reject.

A controller sees the draft's signals, not outcomes: how much of the per-step room it can take
depends on how well those signals predict acceptance (``specrl.rule_tuning.fit_acceptance_predictor``
reports the log loss of that prediction against the base rate).

    python experiments/headroom.py                         # results/headroom.{json,md}
    python experiments/headroom.py --scenarios code --count 1 --out /tmp/headroom   # smoke
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import sys
import time
from pathlib import Path

from tqdm.auto import tqdm

from specrl.envs import cached_traces, load_scenario
from specrl.io import write_text_atomic
from specrl.latency import calibrated
from specrl.oracle import best_static, best_static_per_trace, clairvoyant_bound
from specrl.tables import markdown_table

DEFAULT_SCENARIOS = ["code", "prose", "math", "mixed", "code_t1", "prose_t1", "license", "license_t1"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--scenarios", nargs="+", default=DEFAULT_SCENARIOS, help="scenario names or YAML paths"
    )
    parser.add_argument("--split", default="test", help="trace split (test, validation, train)")
    parser.add_argument(
        "--count", type=int, default=4, help="acceptance draws per trace for sampled scenarios"
    )
    parser.add_argument("--out", default="results/headroom", help="output stem (.json and .md are added)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    started = time.perf_counter()
    rows = {}
    latency = None
    for name in tqdm(args.scenarios, desc="scenarios"):
        scenario = load_scenario(name).with_overrides(time="modeled")
        pair = scenario.pair.load()
        latency = latency or calibrated(pair, k_max=scenario.k_max)
        traces = cached_traces(scenario, args.split, pair)
        static = best_static(traces, latency, scenario.tau_grid, count=args.count)
        prompt = best_static_per_trace(traces, latency, scenario.tau_grid, count=args.count)
        oracle = clairvoyant_bound(traces, latency, count=args.count)
        rows[name] = {
            "traces": len(traces.traces),
            "per_scenario_static": {"k": static.k, "tau": static.tau, "tokens_per_s": static.tokens_per_s},
            "per_prompt_static": prompt.tokens_per_s,
            "clairvoyant": oracle.tokens_per_s,
        }
    results = {
        "rows": rows,
        "split": args.split,
        "count": args.count,
        "latency_device": latency.device,
        "machine": platform.machine(),
        "command": command,
        "seconds": round(time.perf_counter() - started),
    }
    write_text_atomic(Path(args.out).with_suffix(".json"), json.dumps(results, indent=2))
    text = render(results)
    write_text_atomic(Path(args.out).with_suffix(".md"), text)
    print(text)


def render(results: dict) -> str:
    """The markdown page of a run."""
    lines = [
        f"Room over the best static setting, {results['split']} traces, simulator (modeled time, "
        f"latency model of {results['latency_device']}); sampled scenarios: {results['count']} acceptance "
        "draws per trace, the same for every bound.",
        "",
    ]
    header = ["scenario", "traces", "best static per scenario", "best static per prompt"]
    header += ["clairvoyant per step", "per prompt / per scenario", "clairvoyant / per prompt"]
    rows = []
    for name, row in results["rows"].items():
        static = row["per_scenario_static"]
        rows.append(
            [
                name,
                row["traces"],
                f"{static['tokens_per_s']:.1f} (k={static['k']}, tau={static['tau']})",
                f"{row['per_prompt_static']:.1f}",
                f"{row['clairvoyant']:.1f}",
                f"{row['per_prompt_static'] / static['tokens_per_s']:.3f}",
                f"{row['clairvoyant'] / row['per_prompt_static']:.3f}",
            ]
        )
    lines += [
        markdown_table(header, rows),
        "",
        f"Command: `{results['command']}` ({results['seconds']} s). Machine: {results['machine']}, "
        f"{results['latency_device']}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
