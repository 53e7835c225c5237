"""Profile a (target, draft) pair's forward latencies on this device; save the latency model.

Runs :func:`specrl.latency.profile` (target forwards over 1..k_max + 1 new tokens and
one-token draft forwards at a grid of context lengths, KV cache, medians over repeats,
interleaved, warm-up excluded; held-out midpoints measured for the fit error) and writes:

  <out>.json   the latency model (the cache path that scenarios' ``latency: calibrated``
               reads, unless --out is given; give that path as ``latency: PATH`` instead)
  <out>.md     target ms by n x context, draft ms by context, held-out fit error (also printed)

Measure on a quiet machine: other processes on the cores inflate and scatter the times.

    python experiments/calibrate.py                                    # default pair -> the cache
    python experiments/calibrate.py --force --repeats 9                # measure again, more repeats
    python experiments/calibrate.py --out results/latency/small-cpu.json
    python experiments/calibrate.py --preset tiny --repeats 2 --contexts 16 64 --out /tmp/t.json  # smoke
"""

from __future__ import annotations

import argparse
from pathlib import Path

import specrl
from specrl.io import write_text_atomic
from specrl.latency import LatencyError, LatencyModel, latency_path, profile


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--preset",
        default=None,
        help="embedded pair to profile: small (the default when no --target is given) or tiny",
    )
    parser.add_argument("--target", default=None, help="HF id or local path of a target, with --draft")
    parser.add_argument("--draft", default=None, help="HF id or local path of the draft, with --target")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: CUDA when present)")
    parser.add_argument(
        "--dtype", default=None, help="float32, bfloat16, ... (default: bf16 on GPU, fp32 on CPU)"
    )
    parser.add_argument(
        "--k-max",
        type=int,
        default=8,
        help="largest k to model: target forwards over 1..K+1 tokens are timed (default 8)",
    )
    parser.add_argument(
        "--repeats", type=int, default=5, help="timed passes; every cell is the median over them (default 5)"
    )
    parser.add_argument(
        "--contexts",
        type=int,
        nargs="+",
        default=None,
        metavar="N",
        help="context lengths of the grid (default: 16, 32, 64, ... doubling, then the "
        "window minus K+1, at most 4096); midpoints are measured for the fit error",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="JSON file to write (default: the cache file that `latency: calibrated` reads, "
        "under $SPECRL_HOME/latency/); the .md table goes next to it",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="measure even if the output file exists (default: report the existing one)",
    )
    args = parser.parse_args(argv)
    if (args.target is None) != (args.draft is None):
        parser.error("give --target and --draft together")
    if args.target is not None and args.preset is not None:
        parser.error("give either --preset or --target and --draft")
    if args.k_max < 1 or args.repeats < 1:
        parser.error("--k-max and --repeats must be >= 1")
    return args


def main(argv: list[str] | None = None) -> LatencyModel:
    args = parse_args(argv)
    pair = specrl.load_pair(args.target, args.draft, preset=args.preset, device=args.device, dtype=args.dtype)
    path = args.out or latency_path(pair)
    model = None
    if path.is_file() and not args.force:
        try:
            model = LatencyModel.load(path)
            print(f"{path} exists; reporting it (--force measures again)")
        except LatencyError as error:
            print(f"{error}\nmeasuring again")
    if model is None:
        model = profile(pair, k_max=args.k_max, contexts=args.contexts, repeats=args.repeats)
        model.save(path)
    markdown = model.to_markdown()
    write_text_atomic(path.with_suffix(".md"), markdown)
    print(markdown)
    print(f"wrote {path} and {path.with_suffix('.md')}")
    return model


if __name__ == "__main__":
    main()
