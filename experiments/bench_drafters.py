"""The drafter pool measured in the real loop: acceptance, cost and speed-up of every drafter, per domain.

For every domain, every drafter (``draft``, ``draft-mid``, ``draft-int8``, ``draft-int4``, ``ngram``,
``cascade``) and every k of ``--ks``, greedy decoding of the same prompts with
``StaticController(k, 0, drafter)``, interleaved with plain decoding (k = 0): within a pass every
prompt runs every configuration in a shuffled (seeded) order, so machine noise hits all alike;
one untimed warm-up pass first. A configuration's speed is the median over passes of (tokens /
seconds summed over the prompts), prefill included; its speed-up is that over plain decoding's.

The best static k of each drafter is chosen on the **validation** prompts and reported on the
**test** prompts (docs/design.md section 4b). Per drafter and domain the table gives:

- acceptance (accepted / proposed) at the chosen k, on test;
- the cost of one drafted position relative to one target verification (draft seconds per
  drafted position over verify seconds per step), on test over every k;
- the speed-up over plain decoding at the chosen k, on test; and the best single drafter per domain.

For the quantised drafts it also gives the change against the full-precision draft at the same k
(acceptance difference, cost ratio): the seed's claim is that quantisation trades acceptance for
cost. Every output is checked token for token against plain decoding. With ``--batch B`` each
domain's prompts are decoded B at a time (one action per step for the B rows, each accepting its own
tokens): the same table for a batch, the drafter pool included.

Run from the repository root (offline, on the embedded default pair; about 30 minutes on 2 CPU cores):

    python experiments/bench_drafters.py
    python experiments/bench_drafters.py --quick     # a minute: 1 prompt, 16 tokens, k 1 and 4, 1 pass
    python experiments/bench_drafters.py --batch 4 --prompts 4 --out results/drafters/batch4   # B = 4
    python experiments/bench_drafters.py --scenario smollm2 --drafters draft,ngram \\
        --out results/smollm2/drafters                     # a pair and prompts of a scenario

``--scenario`` takes the pair and the prompts (a prompt file, chat-formatted where it says so) from a
scenario: how a pair without embedded prompts is measured.

Writes ``results/drafters/drafters.json`` (every run), ``drafters.md``, ``drafters.png`` and its
section of the folder's ``README.md``. A benchmark, not a test: the ratios are the claim,
measured on this machine.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.drafters import POOL_RULE, SPLITS, measure, summarise
from benchmarks.drafters_page import markdown, write
from benchmarks.origin import result_origin
from benchmarks.prompts import DOMAINS, first_prompts, scenario_prompts

import specrl
from specrl.engine.drafters import DRAFTERS, DrafterPool
from specrl.envs import load_scenario
from specrl.evaluation.machine import pair_info

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--drafters", default=",".join(DRAFTERS), help="comma-separated drafter names")
    parser.add_argument(
        "--domains", help=f"comma-separated prompt domains (default: {','.join(DOMAINS)}, or the scenario's)"
    )
    parser.add_argument("--ks", default="1,2,4,6", help="static k values tried per drafter")
    parser.add_argument("--prompts", type=int, default=3, help="prompts per domain and split")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=1, help="prompts decoded together (rows of a batch)")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved passes; medians over them")
    parser.add_argument("--seed", type=int, default=0, help="seed of the configuration order")
    parser.add_argument("--preset", help="embedded pair (small, the default; tiny for a smoke test)")
    parser.add_argument("--scenario", help="a scenario whose pair and prompts to decode (name or YAML)")
    parser.add_argument("--out", default=str(REPO / "results" / "drafters"), help="output folder")
    parser.add_argument("--render", action="store_true", help="rewrite the page and plot from the JSON")
    parser.add_argument("--quick", action="store_true", help="1 prompt, 16 tokens, k 1 and 4, 1 pass")
    args = parser.parse_args(argv)
    if args.quick:
        args.prompts, args.max_new_tokens, args.ks, args.repeats = 1, 16, "1,4", 1
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    if args.render:
        report = json.loads((out / "drafters.json").read_text())
        write(report, out)
        return report
    drafters = args.drafters.split(",")
    ks = [int(k) for k in args.ks.split(",")]
    if args.scenario:
        scenario = load_scenario(args.scenario).with_overrides(preset=args.preset)
        pair = scenario.pair.load()
        domains = args.domains.split(",") if args.domains else scenario.domains
        prompts = {split: scenario_prompts(scenario, pair, split, domains, args.prompts) for split in SPLITS}
    else:
        pair = specrl.load_pair(preset=args.preset or "small")
        domains = args.domains.split(",") if args.domains else list(DOMAINS)
        prompts = {split: first_prompts(pair, split, domains, args.prompts) for split in SPLITS}
    for drafter in drafters:
        DrafterPool(pair).check(drafter)
    runs = measure(pair, prompts, drafters, ks, args.max_new_tokens, args.repeats, args.seed, args.batch)
    report = {
        "table": summarise(runs, [*drafters, POOL_RULE], domains, ks),
        "config": {"drafters": [*drafters, POOL_RULE], "domains": domains, "ks": ks, "prompts": args.prompts,
                   "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "seed": args.seed,
                   "batch": args.batch, "scenario": args.scenario},
        "pair": pair_info(pair),
        **result_origin(pair),
        "runs": runs,
    }  # fmt: skip
    write(report, out)
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
