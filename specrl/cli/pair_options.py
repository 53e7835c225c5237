"""The pair options a subcommand shares: an embedded preset, or a target and a draft (HF ids or
local paths), the device and the dtype; checked before any model loads."""

from __future__ import annotations

import argparse


def add_pair_arguments(parser: argparse.ArgumentParser, preset_default: str | None = None) -> None:
    """``--pair`` (alias ``--preset``), ``--target``/``--draft``, ``--device`` and ``--dtype`` in a
    "pair" group."""
    pair = parser.add_argument_group("pair")
    default = f"; default {preset_default}" if preset_default else "; default: the scenarios' own"
    pair.add_argument(
        "--pair",
        "--preset",
        dest="preset",
        metavar="NAME",
        default=preset_default,
        help=f"a named pair: small, tiny (embedded), smollm2 (`specrl fetch smollm2` first){default}",
    )
    pair.add_argument("--target", default=None, help="target model: HF id or local path, with --draft")
    pair.add_argument("--draft", default=None, help="draft model: HF id or local path, with --target")
    pair.add_argument("--device", default=None, help="cpu, cuda, ... (default: CUDA when present)")
    pair.add_argument(
        "--dtype", default=None, help="float32, bfloat16, ... (default: bf16 on GPU, fp32 on CPU)"
    )


def check_pair_arguments(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``parser.error`` unless the target and the draft come together, and without a preset asked
    for beside them; they replace a default preset."""
    if (args.target is None) != (args.draft is None):
        parser.error("give --target and --draft together")
    if args.target is not None:
        if args.preset != parser.get_default("preset"):
            parser.error("give either --pair or --target and --draft")
        args.preset = None


def pair_values(args: argparse.Namespace) -> dict:
    """The pair options as keyword arguments (of ``load_pair`` and ``scenario_choice.Overrides``)."""
    return {name: getattr(args, name) for name in ("preset", "target", "draft", "device", "dtype")}
