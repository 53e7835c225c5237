"""Train a PPO policy that picks (k, tau) for speculative decoding.

Not built yet: PPO training, export and online loading arrive with issue 5 ("PPO training,
policy export, online loading, TensorBoard"), on top of the environment of issue 3 and the
trace-replay simulator of issue 4. Until then this script checks that the embedded default
pair is available (building it if needed) and decodes one held-out prompt with it, so the
command in the README already exercises the whole foundation on a fresh machine.
"""

from __future__ import annotations

import argparse

import specrl


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", default="small", help="embedded pair to use (small or tiny)")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens to generate")
    args = parser.parse_args()

    pair = specrl.load_pair(preset=args.preset)
    prompt = pair.prompts["heldout"]["code"][0]
    for k in (0, 4):
        out = specrl.SpeculativeDecoder(pair, specrl.StaticController(k)).generate(
            prompt, max_new_tokens=args.max_new_tokens
        )
        print(f"k={k}: {out.stats.tokens_per_s:.1f} tokens/s, acceptance {out.stats.acceptance_rate:.2f}")
    print(prompt + out.text)
    print("\nPPO training is not implemented yet: it arrives with issue 5 (see the module docstring).")


if __name__ == "__main__":
    main()
