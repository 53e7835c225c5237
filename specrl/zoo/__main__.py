"""``python -m specrl.zoo build --preset small --seed 0 [--out DIR | --ship]``."""

from __future__ import annotations

import argparse
import json
import sys

import torch

from specrl.zoo.build import build, cached_dir, shipped_dir
from specrl.zoo.presets import PRESETS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrl.zoo", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build an embedded pair from the stdlib, offline")
    b.add_argument("--preset", choices=sorted(PRESETS), default="small", help="pair size")
    b.add_argument("--seed", type=int, default=0, help="seed of the whole build")
    b.add_argument("--out", default=None, help="output directory (default: the cache)")
    b.add_argument(
        "--ship",
        action="store_true",
        help="write float16 weights into the package (specrl/zoo/weights/<preset>)",
    )
    b.add_argument("--device", default=None, help="training device (default: cuda if present)")
    args = parser.parse_args(argv)
    out = shipped_dir(args.preset) if args.ship else (args.out or cached_dir(args.preset, args.seed))
    path = build(
        args.preset,
        args.seed,
        out,
        save_dtype=torch.float16 if args.ship else None,
        device=args.device,
        command="python -m specrl.zoo " + " ".join(sys.argv[1:]),
    )
    card = json.loads((path / "card.json").read_text())
    print(json.dumps({"dir": str(path), "heldout": card["heldout"]}, indent=2))


if __name__ == "__main__":
    main()
