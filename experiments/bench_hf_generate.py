"""specrl inside HF ``generate`` against HF's own assisted generation: same pair, same prompts.

Rows, all through ``pair.target.generate`` on the same prompt ids, greedy, exactly
``--max-new-tokens`` tokens each (``eos_token_id=None``):

  hf plain                      ``generate`` without a draft (the reference: ratios are against it);
  hf assisted default           ``assistant_model=draft`` with the draft's generation_config as is
                                (transformers' defaults: 20 tokens, schedule "constant", confidence
                                threshold 0.4);
  hf assisted heuristic         the same with schedule "heuristic" (HF adapts the length and keeps
                                it across calls; so does this row, on its own config);
  hf assisted constant k=4      schedule "constant", 4 tokens, confidence threshold off;
  specrl static k=4             ``custom_generate=specrl.hf.speculative_generate``, StaticController(4);
  specrl tcp                    the same with the TCP-like heuristic;
  specrl learned:<policy>       the same with the exported policy (default: the shipped one).

In transformers 5.x the assisted settings are read from the assistant's generation_config, so
each assisted row owns a copy that is swapped onto the draft for its calls only
(:mod:`specrl.hf_assisted`). One untimed warm-up pass, then ``--repeats`` passes; within a pass
every prompt runs every row in a shuffled (seeded) order, so machine noise hits all alike. A
row's figure is the median over passes of (tokens / seconds summed over the prompts), per domain
and over all; the time is the wall clock of the whole ``generate`` call (prefill included,
device-synchronised). It also records new tokens per target forward and whether each row's
output equals ``hf plain``'s token for token.

Run from the repository root (offline, on the embedded default pair; 3-4 minutes on 2 busy CPU cores):

    python experiments/bench_hf_generate.py
    python experiments/bench_hf_generate.py --quick        # seconds: 1 prompt/domain, 16 tokens, 1 pass

Writes ``results/hf_generate/hf_generate.json`` (runs, summaries, config, machine) and ``.md`` (``--out``),
and its section of the folder's ``README.md``.
A benchmark, not a test: the ratios are the claim; absolute speeds only mean something on the
machine that produced them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from benchmarks.hf_generate import run
from benchmarks.hf_generate_page import markdown, write
from benchmarks.origin import result_origin
from benchmarks.prompts import DOMAINS, first_prompts

import specrl
from specrl.evaluation.machine import pair_info
from specrl.provenance import command_line

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompts-per-domain", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--k", type=int, default=4, help="k of the static and constant-schedule rows")
    parser.add_argument("--policy", default="default", help="exported policy folder or shipped name")
    parser.add_argument("--seed", type=int, default=0, help="seed of the row order")
    parser.add_argument(
        "--out", default=str(REPO / "results" / "hf_generate" / "hf_generate"), help="output stem"
    )
    parser.add_argument("--preset", default=None, help="embedded pair (small, or tiny for a smoke test)")
    parser.add_argument("--quick", action="store_true", help="1 prompt/domain, 16 tokens, 1 pass")
    args = parser.parse_args(argv)
    if args.quick:
        args.max_new_tokens, args.prompts_per_domain, args.repeats = 16, 1, 1
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    pair = specrl.load_pair(preset=args.preset)
    prompts = first_prompts(pair, "test", DOMAINS, args.prompts_per_domain)
    report = run(pair, prompts, args.max_new_tokens, args.repeats, args.policy, args.k, args.seed)
    origin = result_origin(pair)
    report.update(pair=pair_info(pair), machine=origin["machine"], date=origin["date"])
    write(report, args.out, command_line())
    print(markdown(report, command_line()))
    return report


if __name__ == "__main__":
    main()
