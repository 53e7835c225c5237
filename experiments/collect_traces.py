"""Record the acceptance traces the trace-replay simulator replays (specrl/traces.py).

For each scenario and split: every prompt of the scenario's domains (up to
--prompts-per-domain) is decoded plainly by the target, then both models run teacher-forced
over the result. Traces are cached under $SPECRL_HOME/traces/<pair>/ (train_ppo.py and
evaluate.py collect what is missing on their own); --ship writes them into the package next
to an embedded pair's weights instead, so a fresh install replays without collecting.

    python experiments/collect_traces.py                                  # every shipped scenario
    python experiments/collect_traces.py --scenarios code code_t1 --split heldout
    python experiments/collect_traces.py --preset small --ship             # what the package ships
"""

from __future__ import annotations

import argparse
import time

from specrl.envs import load_scenario, shipped_scenarios
from specrl.traces import DEFAULT_PROMPTS_PER_DOMAIN, cache_key, cache_parts, cached_traces, trace_dirs

# Scenarios whose traces are the union of others' (same prompts, same settings): not recorded twice.
JOINED = {"mixed", "mixed_t1"}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--preset", default=None, help="embedded pair to use instead of the scenario's (small, tiny)"
    )
    parser.add_argument(
        "--scenarios",
        nargs="+",
        default=None,
        help="scenario names or YAML paths (default: every shipped scenario)",
    )
    parser.add_argument(
        "--split", choices=("train", "heldout", "both"), default="both", help="prompt split(s) to record"
    )
    parser.add_argument(
        "--prompts-per-domain",
        type=int,
        default=None,
        help=f"prompts per domain (default: {DEFAULT_PROMPTS_PER_DOMAIN})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the episodes (sampling, shift prompts)")
    parser.add_argument(
        "--ship",
        action="store_true",
        help="write into the package's shipped folder of the embedded pair, not the cache",
    )
    args = parser.parse_args()

    names = args.scenarios or [n for n in shipped_scenarios() if n not in JOINED]
    splits = ("train", "heldout") if args.split == "both" else (args.split,)
    pair = None
    for name in names:
        scenario = load_scenario(name).with_overrides(preset=args.preset)
        pair = pair or scenario.pair.load()
        for split in splits:
            start = time.perf_counter()
            traces = cached_traces(
                scenario, split, pair, prompts_per_domain=args.prompts_per_domain, seed=args.seed
            )
            if args.ship:
                n = args.prompts_per_domain or DEFAULT_PROMPTS_PER_DOMAIN[split]
                for part in cache_parts(scenario):
                    part_traces = cached_traces(part, split, pair, prompts_per_domain=n, seed=args.seed)
                    part_traces.save(trace_dirs(pair)[0] / (cache_key(part, split, n, args.seed) + ".npz"))
            tokens = sum(t.tokens for t in traces.traces)
            print(
                f"{name:>18} {split:>8}: {len(traces)} traces, {tokens} tokens "
                f"({time.perf_counter() - start:.0f} s)"
            )


if __name__ == "__main__":
    main()
