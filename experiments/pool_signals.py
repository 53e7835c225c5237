"""What the text's own signals can buy a drafter-pool controller, in the simulator.

The clairvoyant oracle over the drafter pool runs 1.3-1.6x the best single drafter (the n-gram
lookup at k = 7 on the default pair), but it knows how much of each proposal the target will
accept. This script asks how much of that room a controller can take from signals it can compute
from the text alone, before each step:

- ``order``: the length (3, 2, 1; 0 without a match) of the longest tail of the text that occurred
  earlier, the n-gram the lookup proposes from;
- ``run``: over how many of the latest positions (capped at 4) the lookup's first token was the one
  the target then emitted (the text is copying a passage);
- ``short``: the lookup can propose fewer than k_max tokens (its match ends just before the tail).

For each set of signals it fits a table policy: one action (k, drafter; tau = 0) per signal value,
the one that maximises throughput over every position of the fit split's traces, found by
Dinkelbach's iteration (choose argmax tokens - rho * seconds per value, set rho to the policy's
throughput, repeat). It scores that table on the report split, against the best static setting
and the clairvoyant oracle on the same traces and acceptance draws, and also fits it on the report
split itself: that in-sample figure is optimistic, a table that sees the traces it is scored on
(Dinkelbach's iteration over one-step sums is not an exact optimum, so it is a yardstick, not a
proof).

    python experiments/pool_signals.py                          # results/pool/signals.{json,md}
    python experiments/pool_signals.py --scenarios code_pool --out /tmp/signals   # one scenario

The analysis lives in specrl/evaluation/pool_signals/.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tqdm.auto import tqdm

from specrl.evaluation.machine import command_line, machine_info
from specrl.evaluation.pool_signals import analyse, render
from specrl.io import write_text_atomic

DEFAULT_SCENARIOS = ["mixed_pool", "code_pool", "prose_pool", "math_pool"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", nargs="+", default=DEFAULT_SCENARIOS, help="pool scenarios")
    parser.add_argument("--fit-split", default="validation", help="the split the tables are fit on")
    parser.add_argument("--split", default="test", help="the split they are scored on")
    parser.add_argument("--count", type=int, default=4, help="acceptance draws per sampled trace")
    parser.add_argument("--out", default="results/pool/signals", help="output stem (.json and .md)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    started = time.perf_counter()
    rows, machine = {}, None
    for name in tqdm(args.scenarios, desc="scenarios"):
        rows[name], pair = analyse(name, args.fit_split, args.split, args.count)
        machine = machine or machine_info(pair)
    results = {
        "rows": rows,
        "fit_split": args.fit_split,
        "split": args.split,
        "count": args.count,
        "machine": machine,
        "command": command_line(),
        "seconds": round(time.perf_counter() - started),
    }
    write_text_atomic(Path(args.out).with_suffix(".json"), json.dumps(results, indent=2))
    text = render(results)
    write_text_atomic(Path(args.out).with_suffix(".md"), text)
    print(text)


if __name__ == "__main__":
    main()
