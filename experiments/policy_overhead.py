"""Decision overhead of an exported policy: microseconds per (k, tau) choice, and its share of an iteration.

Two measurements, one run:

1. In a real decode. The pair decodes test prompts speculatively with the policy as the
   controller; every ``act`` call is timed where it happens (between two iterations), and so is
   every call of the per-token stop rule the engine makes inside the draft loop (policies with
   the stop dimension); the mean iteration time is the decode's draft + verify seconds
   (device-synchronised) per step.
2. Alone. ``act`` is called ``--calls`` times on the observations the decode produced, after
   ``--warmup`` untimed calls; the median is the cost of one decision without cache effects of
   the models in between.

For a policy over a drafter pool that offers the n-gram lookup, the lookup features
(a lookup over the text before each decision, :meth:`Generation.lookup_match`) are timed too
and counted in the decision: it is work the policy makes the loop do.

The share of an iteration is the median, over iterations, of the step decision plus that
step's stop-rule calls (plus its lookup feature), over the mean iteration time.
Writes JSON (``--json``) and a markdown table (``--markdown``) and prints the table.

Run from the repository root:

    python experiments/policy_overhead.py specrl/policies/default                       # default pair
    python experiments/policy_overhead.py specrl/policies/default --preset tiny --prompts 1 \\
        --max-new-tokens 32 --calls 2000                                           # smoke run

The measurements live in specrl/evaluation/benchmarks/policy_overhead.py (timed_policy.py times the
policy, policy_overhead_page.py writes the table).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone
from typing import Any

import specrl
from specrl.controllers import LearnedController
from specrl.evaluation.benchmarks.policy_overhead import measure
from specrl.evaluation.benchmarks.policy_overhead_page import markdown
from specrl.export import PolicyError
from specrl.io import write_text_atomic


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("policy", help="exported policy folder (policies/<name>)")
    parser.add_argument("--preset", default="small", help="embedded pair to decode with (small, tiny)")
    parser.add_argument(
        "--target", help="target model: HF id or local path (with --draft), instead of --preset"
    )
    parser.add_argument("--draft", help="draft model: HF id or local path (with --target)")
    parser.add_argument(
        "--device", help="device of the models (default: cuda if present); the policy runs on CPU"
    )
    parser.add_argument("--prompts", type=int, default=2, help="test prompts per domain to decode")
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens per generation")
    parser.add_argument("--temperature", type=float, default=0.0, help="sampling temperature (0 = greedy)")
    parser.add_argument(
        "--calls", type=int, default=20000, help="timed act calls in the isolated measurement"
    )
    parser.add_argument("--warmup", type=int, default=1000, help="untimed act calls before timing")
    parser.add_argument("--json", dest="json_path", help="write the results as JSON here")
    parser.add_argument("--markdown", help="write the markdown table here")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    try:
        controller = LearnedController.load(args.policy)
    except PolicyError as error:
        raise SystemExit(f"error: {error}") from None
    if args.target or args.draft:
        pair = specrl.load_pair(target=args.target, draft=args.draft, device=args.device)
    else:
        pair = specrl.load_pair(preset=args.preset, device=args.device)
    warning = controller.pair_warning(pair.name)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)

    measured = measure(
        controller, pair, args.prompts, args.max_new_tokens, args.temperature, args.calls, args.warmup
    )
    result = {
        "policy": args.policy,
        "policy_pair": controller.pair,
        "pair": pair.name,
        "device": str(pair.device),
        **measured,
        "command": " ".join(["python", *sys.argv])
        if argv is None
        else f"policy_overhead.py {' '.join(argv)}",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    table = markdown(result)
    print(table)
    if args.json_path:
        write_text_atomic(args.json_path, json.dumps(result, indent=2) + "\n")
    if args.markdown:
        write_text_atomic(args.markdown, table)
    return result


if __name__ == "__main__":
    main()
