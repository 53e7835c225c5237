"""Batched speculative decoding measured in the real loop: speed-up over plain batched decoding by
batch size and k, and acceptance per row.

For every batch size B of ``--batch-sizes`` and every k of ``--ks`` (k = 0 is plain batched
decoding: one target forward per token for the whole batch), the default pair decodes B test
prompts together (the test prompts of every domain, in turn, so a batch mixes domains as served
traffic does) with ``StaticController(k)``. Within a pass every (B, k) runs once, in a shuffled
(seeded) order, so machine noise hits all alike; one untimed warm-up pass first. Reported per
(B, k):

- tokens/s summed over rows (every row's new tokens over the batch's time, prefill included),
  the median over passes;
- the speed-up over plain batched decoding at the same B: the median over passes of the ratio
  within a pass;
- acceptance per row (accepted / proposed of each row; mean, min and max over rows). Exact
  speculative sampling says it does not depend on B: a greedy row accepts exactly what its
  prompt accepts alone (``tests/test_batch.py``). What B changes is the cost: verification
  scores B x (k + 1) tokens per step, and the draft runs B rows per forward.

Every output is checked token for token against plain batched decoding (greedy).

Run from the repository root (offline, on the embedded default pair):

    python experiments/bench_batch.py                # results/batch/batch.{json,md,png}
    python experiments/bench_batch.py --quick        # a minute: B 1 and 4, k 0 and 3, 8 tokens

A benchmark, not a test: the ratios are the claim, measured on this machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.batch import measure, prompt_pool, same_prompt_spread, summarise
from benchmarks.batch_page import markdown, write
from benchmarks.origin import result_origin

import specrl
from specrl.evaluation.machine import pair_info

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32,64", help="comma-separated batch sizes")
    parser.add_argument("--ks", default="0,1,2,3,4,5,6,7,8", help="comma-separated k (0: plain decoding)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens per row")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved passes; medians over them")
    parser.add_argument("--seed", type=int, default=0, help="seed of the configuration order")
    parser.add_argument("--preset", default="small", help="embedded pair (small, or tiny for a smoke test)")
    parser.add_argument("--out", default=str(REPO / "results" / "batch"), help="output folder")
    parser.add_argument("--render", action="store_true", help="rewrite the page and plot from the JSON")
    parser.add_argument("--quick", action="store_true", help="B 1 and 4, k 0 and 3, 8 tokens, 1 pass")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_sizes, args.ks, args.max_new_tokens, args.repeats = "1,4", "0,3", 8, 1
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    if args.render:
        report = json.loads((out / "batch.json").read_text())
        config = report["config"]
        report["table"] = summarise(report["runs"], config["batch_sizes"], config["ks"])
        report["same_prompt_spread"] = same_prompt_spread(report["runs"], config["ks"])
        write(report, out)
        return report
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    ks = [int(k) for k in args.ks.split(",")]
    if 0 not in ks:
        ks = [0, *ks]  # plain batched decoding is every speed-up's reference
    pair = specrl.load_pair(preset=args.preset)
    runs = measure(pair, prompt_pool(pair), batch_sizes, ks, args.max_new_tokens, args.repeats, args.seed)
    report = {
        "table": summarise(runs, batch_sizes, ks),
        "same_prompt_spread": same_prompt_spread(runs, ks),
        "config": {"batch_sizes": batch_sizes, "ks": ks, "max_new_tokens": args.max_new_tokens,
                   "repeats": args.repeats, "seed": args.seed},
        "pair": pair_info(pair),
        **result_origin(pair),
        "runs": runs,
    }  # fmt: skip
    write(report, out)
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
