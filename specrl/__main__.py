"""Command line: decode one prompt speculatively and print the text and the generation's statistics.

    python -m specrl generate --prompt "def fib(n):" [--k 4 --tau 0.0 --drafter ngram]
    python -m specrl generate --prompt "def fib(n):" --policy policies/default

``--k``/``--tau``/``--drafter`` fix (k, tau, drafter) for every iteration; ``--policy`` lets an
exported PPO policy (``specrl.LearnedController``) choose them each iteration instead. The
statistics are JSON: tokens/s, acceptance rate, steps, and the mean k and tau the controller asked for.
"""

from __future__ import annotations

import argparse
import json
import sys

import specrl
from specrl.controllers import Controller, LearnedController, StaticController
from specrl.engine.drafters import DRAFTERS, DrafterError, DrafterPool
from specrl.export import PolicyError

DEFAULT_K = 4
DEFAULT_TAU = 0.0


def make_controller(args: argparse.Namespace, pair: specrl.ModelPair) -> tuple[Controller, dict]:
    """The controller the options ask for, and what to report about it."""
    if args.policy is None:
        k = DEFAULT_K if args.k is None else args.k
        tau = DEFAULT_TAU if args.tau is None else args.tau
        drafter = args.drafter or "draft"
        try:
            DrafterPool(pair).check(drafter)
        except DrafterError as error:
            raise SystemExit(f"error: {error}") from None
        return StaticController(k, tau, drafter), {"k": k, "tau": tau, "drafter": drafter}
    try:
        controller = LearnedController.load(args.policy)
    except PolicyError as error:
        raise SystemExit(f"error: {error}") from None
    warning = controller.pair_warning(pair.name)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    return controller, {"policy": args.policy, "policy_pair": controller.pair, "k_max": controller.k_max}


def generate(args: argparse.Namespace) -> None:
    if args.target or args.draft:
        pair = specrl.load_pair(target=args.target, draft=args.draft, device=args.device)
    else:
        pair = specrl.load_pair(preset=args.preset, device=args.device)
    controller, described = make_controller(args, pair)
    decoder = specrl.SpeculativeDecoder(pair, controller)
    out = decoder.generate(
        args.prompt,
        max_new_tokens=args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
    )
    print(args.prompt + out.text)
    steps = max(1, len(out.steps))
    asked = {  # what the controller asked for; the engine may clip k near the end of the budget
        "mean_k": sum(s.action.k for s in out.steps) / steps,
        "mean_tau": sum(s.action.tau for s in out.steps) / steps,
    }
    print(json.dumps({"pair": pair.name} | described | out.stats.to_dict() | asked, indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m specrl", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one prompt speculatively and print stats")
    g.add_argument("--prompt", required=True, help="text to continue")
    g.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate")
    control = g.add_mutually_exclusive_group()
    # Defaults of None, filled in later: argparse only sees a conflict for values that are not the default.
    control.add_argument(
        "--k", type=int, help=f"draft tokens per iteration (0 = plain decoding; default {DEFAULT_K})"
    )
    control.add_argument(
        "--policy", help="exported policy folder (policies/<name>) choosing k and tau each iteration"
    )
    g.add_argument(
        "--tau", type=float, help=f"draft confidence cut in [0, 1] (default {DEFAULT_TAU}; not with --policy)"
    )
    g.add_argument(
        "--drafter", choices=DRAFTERS, help="what proposes the tokens (default draft; not with --policy)"
    )
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0, help="top-k filter (0 = off)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus filter (1 = off)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed")
    g.add_argument("--preset", default="small", help="embedded pair (small, tiny)")
    g.add_argument("--target", help="target model: HF id or local path (with --draft)")
    g.add_argument("--draft", help="draft model: HF id or local path (with --target)")
    g.add_argument("--device", help="cpu, cuda, ... (default: cuda if present)")
    args = parser.parse_args(argv)
    if args.policy is not None and args.tau is not None:
        g.error("argument --tau: not allowed with argument --policy (the policy chooses tau)")
    if args.policy is not None and args.drafter is not None:
        g.error("argument --drafter: not allowed with argument --policy (the policy drafts with the draft)")
    generate(args)


if __name__ == "__main__":
    main()
