"""``python -m specrl.embedded build --preset small --seed 0 [--out DIR | --ship] [--max-seconds S]``;
``python -m specrl.embedded add-mid [--preset small --ship | DIR]`` distils the second draft into a
built pair."""

from __future__ import annotations

import argparse
import json
import sys

import torch

from specrl.embedded.build import add_mid, build, cached_dir, shipped_dir
from specrl.embedded.presets import PRESETS


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrl.embedded", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build an embedded pair from the stdlib, offline")
    b.add_argument("--preset", choices=sorted(PRESETS), default="small", help="pair size")
    b.add_argument("--seed", type=int, default=0, help="seed of the whole build")
    b.add_argument("--out", default=None, help="output directory (default: the cache)")
    b.add_argument("--ship", action="store_true", help="write float16 weights into the package")
    b.add_argument("--device", default=None, help="training device (default: cuda if present)")
    b.add_argument(
        "--max-seconds", type=float, default=None, help="wall-clock cap on training (default: none)"
    )
    m = sub.add_parser("add-mid", help="distil the preset's second draft (draft-mid) into a built pair")
    m.add_argument("dir", nargs="?", default=None, help="the pair directory (default: the shipped one)")
    m.add_argument("--preset", choices=sorted(PRESETS), default="small", help="pair size, without DIR")
    m.add_argument("--ship", action="store_true", help="write float16 weights (as the shipped pair has)")
    m.add_argument("--device", default=None, help="training device (default: cuda if present)")
    args = parser.parse_args(argv)
    command = "python -m specrl.embedded " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.command == "add-mid":
        path = add_mid(
            args.dir or shipped_dir(args.preset),
            save_dtype=torch.float16 if args.ship else None,
            device=args.device,
            command=command,
        )
        card = json.loads((path / "card.json").read_text())
        print(json.dumps({"dir": str(path), "draft-mid": card["draft-mid"]["heldout"]}, indent=2))
        return
    out = shipped_dir(args.preset) if args.ship else (args.out or cached_dir(args.preset, args.seed))
    path = build(
        args.preset,
        args.seed,
        out,
        save_dtype=torch.float16 if args.ship else None,
        device=args.device,
        command=command,
        max_seconds=args.max_seconds,
    )
    card = json.loads((path / "card.json").read_text())
    print(json.dumps({"dir": str(path), "heldout": card["heldout"], "budget": card.get("budget")}, indent=2))


if __name__ == "__main__":
    main()
