"""The spread over training seeds of a policy's simulator results on test traces.

Reads the ``metadata.json`` of several exported policies (``train_ppo.py --seed N`` runs; each
records its test-trace comparison under ``evaluation``) and writes, per scenario, the
minimum / median / maximum over seeds of PPO's ratio to TCP, to the best rule (the best of TCP,
the HF heuristic, AdaEDL, the SpecDec++-style rule and the best static setting in hindsight)
and to the clairvoyant oracle.

    python experiments/seed_spread.py specrl/policies/default results/train_seeds/seed1 \\
        results/train_seeds/seed2 --out results/train_seeds/spread.md
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from pathlib import Path

from specrl.io import write_text_atomic
from specrl.tables import markdown_table
from specrl.training import comparison_ratios


def spread(values: list[float]) -> str:
    return f"{min(values):.3f} / {statistics.median(values):.3f} / {max(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("policies", nargs="+", type=Path, help="policy folders (with metadata.json)")
    parser.add_argument("--out", type=Path, default=None, help="write the markdown here too")
    args = parser.parse_args()
    runs = []
    for folder in args.policies:
        metadata = json.loads((folder / "metadata.json").read_text())
        runs.append((metadata["command"], metadata["evaluation"]["sim_test_tokens_per_s"]))
    scenarios = list(runs[0][1])
    lines = [
        f"Spread over {len(runs)} training runs (seeds) of PPO's simulator results on test traces: "
        "min / median / max over runs.",
        "",
    ]
    table = []
    for scenario in scenarios:
        per_run = [comparison_ratios(rows[scenario]) for _, rows in runs if scenario in rows]
        table.append(
            [scenario, *(spread([r[key] for r in per_run]) for key in ("tcp", "best rule", "oracle"))]
        )
    lines.append(markdown_table(["scenario", "PPO / TCP", "PPO / best rule", "PPO / oracle"], table))
    lines += ["", "Runs:", ""] + [f"- `{command}`" for command, _ in runs]
    lines += ["", f"Command: `python {' '.join(shlex.quote(a) for a in sys.argv)}`", ""]
    text = "\n".join(lines)
    if args.out:
        write_text_atomic(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
