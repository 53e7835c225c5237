"""Decode one prompt speculatively; print the text and the generation's statistics (JSON).

    specrl generate --prompt "def fib(n):"                          # the shipped default policy
    specrl generate --prompt "def fib(n):" --k 4 --tau 0.0 --drafter ngram   # a fixed setting
    specrl generate --prompt "def fib(n):" --policy mine            # a policy you exported
    specrl generate --pair smollm2 --chat --prompt "Reverse a string in Python."  # an instruct model

``--k``/``--tau``/``--drafter`` fix (k, tau, drafter) for every iteration; otherwise a policy
(``--policy``: a name or a folder; default: the shipped ``default``) chooses them each iteration.
"""

from __future__ import annotations

import argparse
import json
import sys

from specrl.cli.pair_options import add_pair_arguments, check_pair_arguments, pair_values
from specrl.features import FEATURE_DRAFTERS

HELP = "decode one prompt speculatively and print the statistics"
DEFAULT_POLICY = "default"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--prompt", required=True, help="text to continue")
    parser.add_argument(
        "--chat", action="store_true", help="the prompt is a user message, decoded through the chat template"
    )
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate (default 64)")
    control = parser.add_argument_group("control (a policy, or a fixed setting)")
    control.add_argument(
        "--policy", help=f"policy name or folder (default {DEFAULT_POLICY!r} unless --k is given)"
    )
    control.add_argument(
        "--k", type=int, help="draft tokens per iteration, every iteration (0 = plain decoding)"
    )
    control.add_argument("--tau", type=float, help="draft confidence cut in [0, 1], with --k (default 0)")
    control.add_argument(
        "--drafter", choices=FEATURE_DRAFTERS, help="what proposes, with --k (default draft)"
    )
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    sampling.add_argument("--top-k", type=int, default=0, help="top-k filter (0 = off)")
    sampling.add_argument("--top-p", type=float, default=1.0, help="nucleus filter (1 = off)")
    sampling.add_argument("--seed", type=int, default=0, help="sampling seed")
    add_pair_arguments(parser, preset_default="small")


def check(args: argparse.Namespace, parser: argparse.ArgumentParser) -> None:
    """``parser.error`` on options that cannot run, before any model loads."""
    fixed = args.k is not None
    if args.policy is not None and fixed:
        parser.error("give --policy or --k, not both (the policy chooses k)")
    if not fixed and (args.tau is not None or args.drafter is not None):
        parser.error("--tau and --drafter fix a setting: give --k with them (else the policy chooses)")
    if fixed and args.k < 0:
        parser.error(f"--k must be >= 0 (0: plain decoding), got {args.k}")
    if args.tau is not None and not 0.0 <= args.tau <= 1.0:
        parser.error(f"--tau must be in [0, 1] (a confidence), got {args.tau}")
    if args.max_new_tokens < 1:
        parser.error(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    if args.temperature < 0:
        parser.error(f"--temperature must be >= 0 (0: greedy), got {args.temperature}")
    if args.top_k < 0 or not 0.0 < args.top_p <= 1.0:
        parser.error(f"--top-k must be >= 0 and --top-p in (0, 1], got {args.top_k} and {args.top_p}")
    check_pair_arguments(args, parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    check(args, parser)
    import specrl
    from specrl.controllers import LearnedController, StaticController
    from specrl.engine.drafters import DrafterError, DrafterPool
    from specrl.export import PolicyError
    from specrl.pretrained.chat import ChatTemplateError

    described: dict = {}
    if args.k is None:  # the policy is loaded (and verified) before the pair: a bad name fails fast
        try:
            controller = LearnedController.load(args.policy or DEFAULT_POLICY)
        except PolicyError as error:
            parser.error(str(error))
        described = {"policy": str(controller.policy.folder), "policy_pair": controller.pair}
    pair = specrl.load_pair(**pair_values(args))
    prompt = args.prompt
    if args.chat:
        try:
            prompt = pair.chat(args.prompt)
        except ChatTemplateError as error:
            parser.error(f"--chat: {error}")
    if args.k is None:
        warning = controller.pair_warning(pair.name)
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    else:
        tau, drafter = args.tau or 0.0, args.drafter or "draft"
        try:
            DrafterPool(pair).check(drafter)
        except DrafterError as error:
            parser.error(str(error))
        controller = StaticController(args.k, tau, drafter)
        described = {"k": args.k, "tau": tau, "drafter": drafter}
    out = specrl.SpeculativeDecoder(pair, controller).generate(
        prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    )
    print(prompt + out.text)
    steps = max(1, len(out.steps))
    asked = {  # what the controller asked for; the engine may clip k near the end of the budget
        "mean_k": sum(s.action.k for s in out.steps) / steps,
        "mean_tau": sum(s.action.tau for s in out.steps) / steps,
    }
    print(json.dumps({"pair": pair.name} | described | out.stats.to_dict() | asked, indent=2))
    return 0
