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

With ``--profiles``, the scenarios are priced under those profiles of the latency family instead of
this machine's calibration, and the page also gives the **best rule** re-tuned under each (as
``experiments/profiles.py`` tunes it): the bar a policy is held to there, and each bound over it.

    python experiments/headroom.py                         # results/headroom.{json,md}
    python experiments/headroom.py --profiles cpu-xeon-2t gpu-like-h200 --out results/profiles/headroom
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
from specrl.evaluation.profiles import rule_predictor_of
from specrl.io import write_text_atomic
from specrl.latency import calibrated
from specrl.latency.family import profiles as family
from specrl.oracle import best_static, best_static_per_trace, clairvoyant_bound
from specrl.tables import markdown_table
from specrl.training.comparison import Comparison, best_rule_role
from specrl.training.inputs import DEFAULT_SCENARIOS as TRAIN_SCENARIOS
from specrl.training.inputs import load_scenarios

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
    parser.add_argument(
        "--profiles",
        nargs="+",
        default=None,
        help="price under these latency-family profiles, with each one's re-tuned best rule "
        "(default: this machine's calibration, no rules)",
    )
    parser.add_argument("--out", default="results/headroom", help="output stem (.json and .md are added)")
    return parser.parse_args()


def best_rule(scenario, pair, latency, traces, count: int, rule_predictor) -> tuple[str, float]:
    """The fastest rule of the bar re-tuned under ``latency`` (on validation traces, as
    ``experiments/profiles.py`` does) and its tokens/s on ``traces``; the best static setting in
    hindsight counts among them."""
    footing = Comparison(
        pair,
        latency,
        repeats=count,
        tau_grid=scenario.tau_grid,
        predictor=None,
        rule_predictor=rule_predictor,
    )
    tokens, _ = footing.rules_on(scenario, traces)
    role = best_rule_role(tokens)
    return role, tokens[role]


def main() -> None:
    args = parse_args()
    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    started = time.perf_counter()
    if args.profiles:
        known = family()
        unknown = [p for p in args.profiles if p not in known]
        if unknown:
            sys.exit(f"headroom.py: unknown profile(s) {unknown}; known: {list(known)}")
        train = load_scenarios(TRAIN_SCENARIOS, None)
        rule_predictor = rule_predictor_of(train, train[0].pair.load())  # as a training run fits it
    rows = []
    calibration = None
    jobs = [(p, n) for p in (args.profiles or [None]) for n in args.scenarios]
    for profile, name in tqdm(jobs, desc="profiles x scenarios" if args.profiles else "scenarios"):
        scenario = load_scenario(name).with_overrides(time="modeled")
        pair = scenario.pair.load()
        if profile is None:
            calibration = calibration or calibrated(pair, k_max=scenario.k_max)
            latency = calibration
        else:
            latency = known[profile].for_sampling(scenario.sampling)
        traces = cached_traces(scenario, args.split, pair)
        static = best_static(traces, latency, scenario.tau_grid, count=args.count)
        prompt = best_static_per_trace(traces, latency, scenario.tau_grid, count=args.count)
        oracle = clairvoyant_bound(traces, latency, count=args.count)
        row = {
            "profile": profile or latency.device,
            "scenario": name,
            "traces": len(traces.traces),
            "per_scenario_static": {"k": static.k, "tau": static.tau, "tokens_per_s": static.tokens_per_s},
            "per_prompt_static": prompt.tokens_per_s,
            "clairvoyant": oracle.tokens_per_s,
        }
        if profile is not None:
            role, tokens_per_s = best_rule(scenario, pair, latency, traces, args.count, rule_predictor)
            row["best_rule"] = {"role": role, "tokens_per_s": tokens_per_s}
        rows.append(row)
    results = {
        "rows": rows,
        "split": args.split,
        "count": args.count,
        "priced_by": args.profiles or [calibration.device],
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
    priced_by = ", ".join(results["priced_by"])
    with_rules = any("best_rule" in row for row in results["rows"])
    lines = [
        f"Room over the best static setting, {results['split']} traces, simulator (modeled time, "
        f"priced by {priced_by}); sampled scenarios: {results['count']} acceptance draws per trace, "
        "the same for every bound.",
        "",
    ]
    if with_rules:
        lines += [
            "`best rule`: the fastest of the rules re-tuned under the profile (TCP, the HF heuristic, "
            "AdaEDL, the SpecDec++-style rule, the best static setting in hindsight), what "
            "`experiments/profiles.py` holds a policy to. The last two columns are the bounds over it: "
            "a controller that knew each prompt's best static setting from its first step, and one "
            "that knew every step's outcome.",
            "",
        ]
    header = ["profile", "scenario", "traces", "best static per scenario", "best static per prompt"]
    header += ["clairvoyant per step", "per prompt / per scenario", "clairvoyant / per prompt"]
    if with_rules:
        header += ["best rule", "per prompt / best rule", "clairvoyant / best rule"]
    rows = []
    for row in results["rows"]:
        static = row["per_scenario_static"]
        cells = [
            row["profile"],
            row["scenario"],
            row["traces"],
            f"{static['tokens_per_s']:.1f} (k={static['k']}, tau={static['tau']})",
            f"{row['per_prompt_static']:.1f}",
            f"{row['clairvoyant']:.1f}",
            f"{row['per_prompt_static'] / static['tokens_per_s']:.3f}",
            f"{row['clairvoyant'] / row['per_prompt_static']:.3f}",
        ]
        if with_rules:
            rule = row["best_rule"]
            cells += [
                f"{rule['role']} {rule['tokens_per_s']:.1f}",
                f"{row['per_prompt_static'] / rule['tokens_per_s']:.3f}",
                f"{row['clairvoyant'] / rule['tokens_per_s']:.3f}",
            ]
        rows.append(cells)
    lines += [
        markdown_table(header, rows),
        "",
        f"Command: `{results['command']}` ({results['seconds']} s). Machine: {results['machine']}.",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
