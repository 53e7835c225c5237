"""The ``specrl`` command: one subcommand per thing a user does, each a thin call of the library.

Each subcommand's module imports only ``argparse`` at the top: ``--help`` and the argument checks
answer before torch loads; the work's modules load in its ``run``.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from collections.abc import Sequence

#: Subcommand -> its module (``add_arguments(parser)``, ``run(args, parser) -> int | None``, ``HELP``).
COMMANDS = {
    "train": "specrl.cli.train",
    "evaluate": "specrl.cli.evaluate",
    "calibrate": "specrl.cli.calibrate",
    "collect": "specrl.cli.collect",
    "compare": "specrl.cli.compare",
    "generate": "specrl.cli.generate",
    "check": "specrl.cli.check",
    "fetch": "specrl.cli.fetch",
}


#: What :func:`main` adds to a subcommand's parsed options (not options of the command itself).
PLUMBING = ("run", "parser", "command", "command_line")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line: the top level and one sub-parser per command."""
    parser = argparse.ArgumentParser(
        prog="specrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = commands.add_parser(
            name,
            help=module.HELP,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(sub)
        sub.set_defaults(run=module.run, parser=sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's) and run the subcommand; its exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.command_line = "specrl " + shlex.join(argv)  # what the run records (its equivalent command)
    try:
        return args.run(args, args.parser) or 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def options_of(args: argparse.Namespace) -> dict:
    """A subcommand's parsed options, without the command's own plumbing (``run``, ``parser``)."""
    return {key: value for key, value in vars(args).items() if key not in PLUMBING}


def _version() -> str:
    from specrl import __version__

    return __version__
