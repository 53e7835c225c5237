"""Command line: ``python -m specrl generate --prompt "def fib(n):" [--k 4 --tau 0.0]``.

Prints the continuation and the generation's statistics. ``--policy`` (a learned
controller) arrives with the PPO/export issue; until then the controller is static.
"""

from __future__ import annotations

import argparse
import json

import specrl


def generate(args: argparse.Namespace) -> None:
    if args.target or args.draft:
        pair = specrl.load_pair(target=args.target, draft=args.draft, device=args.device)
    else:
        pair = specrl.load_pair(preset=args.preset, device=args.device)
    decoder = specrl.SpeculativeDecoder(pair, specrl.StaticController(args.k, args.tau))
    out = decoder.generate(args.prompt, max_new_tokens=args.max_new_tokens,
                           temperature=args.temperature, top_k=args.top_k, top_p=args.top_p, seed=args.seed)
    print(args.prompt + out.text)
    stats = out.stats.to_dict() | {"mean_k": sum(s.k for s in out.steps) / max(1, len(out.steps))}
    print(json.dumps({"pair": pair.name, "k": args.k, "tau": args.tau} | stats, indent=2))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m specrl", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("generate", help="decode one prompt speculatively and print stats")
    g.add_argument("--prompt", required=True, help="text to continue")
    g.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate")
    g.add_argument("--k", type=int, default=4, help="draft tokens per iteration (0 = plain decoding)")
    g.add_argument("--tau", type=float, default=0.0, help="draft confidence cut in [0, 1]")
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0, help="top-k filter (0 = off)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus filter (1 = off)")
    g.add_argument("--seed", type=int, default=0, help="sampling seed")
    g.add_argument("--preset", default="small", help="embedded pair (small, tiny)")
    g.add_argument("--target", help="target model: HF id or local path (with --draft)")
    g.add_argument("--draft", help="draft model: HF id or local path (with --target)")
    g.add_argument("--device", help="cpu, cuda, ... (default: cuda if present)")
    args = parser.parse_args(argv)
    generate(args)


if __name__ == "__main__":
    main()
