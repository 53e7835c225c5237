"""Is the engine lossless on this device? Three checks on small random Llamas made in memory
(no download, no build): greedy equality with the dynamic and the static KV cache (pass/fail),
greedy agreement in bfloat16 (information), and the chi-square law of sampled tokens (pass/fail).
Exit status 0 when the strict checks pass (:func:`specrl.selfcheck.run_selfcheck`).

    specrl check                                  # on CUDA when present, else the CPU
    specrl check --device cpu --samples 300 --json selfcheck.json
"""

from __future__ import annotations

import argparse
import json
import sys

HELP = "check that the engine is lossless on this device"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default=None, help="torch device (default: cuda when present, else cpu)")
    parser.add_argument(
        "--samples", type=int, default=1000, help="generations per chi-square test (default 1000)"
    )
    parser.add_argument("--tokens", type=int, default=24, help="tokens per greedy run (default 24)")
    parser.add_argument("--json", default=None, help="also write the results to this JSON file")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    if args.samples < 50 or args.tokens < 1:
        parser.error("--samples must be >= 50 and --tokens >= 1")
    import torch

    from specrl.io import write_text_atomic
    from specrl.models import PairError
    from specrl.selfcheck import run_selfcheck

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    print(f"specrl check on {device}", file=sys.stderr)
    try:
        result = run_selfcheck(
            device, samples=args.samples, tokens=args.tokens, log=lambda line: print(line, file=sys.stderr)
        )
    except PairError as error:  # CUDA asked for where torch sees none: the message names the fix
        parser.error(str(error))
    text = json.dumps(result, indent=1)
    if args.json:
        write_text_atomic(args.json, text + "\n")
    print(text)
    print("lossless" if result["passed"] else "NOT LOSSLESS: see the failed checks above", file=sys.stderr)
    return 0 if result["passed"] else 1
