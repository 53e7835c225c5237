"""Distil candidate draft shapes for SmolLM2-135M-Instruct (issue 54 item 2) on the same cached
greedy answers of the target, and give each one's greedy agreement with the target on held-out
requests (the acceptance per drafted token), its cost (``results/smollm2/drafts.json``, measured by
``experiments/smollm2_drafts.py``) and the speed-up they imply.

    python experiments/smollm2_distil.py --shapes 2:8192 4:8192      # layers:kept tokens
    python experiments/smollm2_distil.py --shapes 2:8192 --epochs 1   # a quick look
    python experiments/smollm2_distil.py --shapes --from-card --decode 6   # the fetched pair's draft,
                                                  # and greedy decoding with it on 6 held-out requests

Needs the target fetched (``specrl fetch smollm2``); the target's answers are made once into the
pair's cache (the draft ``specrl fetch`` distils reads the same ones).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks.result_folder import Run, write_readme  # noqa: E402
from smollm2_drafts import speedup  # noqa: E402

from specrl.io import write_text_atomic  # noqa: E402
from specrl.pretrained import SOURCES, pair_dir  # noqa: E402
from specrl.pretrained.distil import distil  # noqa: E402
from specrl.pretrained.sources import DraftShape  # noqa: E402
from specrl.provenance import command_line, load_average, machine  # noqa: E402
from specrl.tables import markdown_table  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "results" / "smollm2"


def parse_shape(text: str) -> DraftShape:
    """``LAYERS:KEPT`` (``KEPT`` 0: every token) or ``LAYERS:KEPT:HIDDEN``."""
    parts = [int(x) for x in text.split(":")]
    layers, kept = parts[0], parts[1] if len(parts) > 1 else 0
    return DraftShape(layers, hidden=parts[2] if len(parts) > 2 else None, kept=kept or None)


def decode_check(requests_per_domain: int, new_tokens: int = 96) -> dict:
    """The fetched pair in the real loop, greedy: plain decoding and static k = 1, 2, 3 with its
    draft on held-out requests, interleaved request by request; totals per setting."""
    import specrl
    from specrl.engine.types import GenerationStats
    from specrl.pretrained.requests import requests

    pair = specrl.load_pair(preset="smollm2", device="cpu")
    sets = requests(SOURCES["smollm2"].draft.seed, evaluation=requests_per_domain)["test"]
    prompts = [pair.chat(m) for messages in sets.values() for m in messages]
    totals = {k: GenerationStats() for k in (0, 1, 2, 3)}
    for prompt in prompts:
        plain = None
        for k, stats in totals.items():
            out = specrl.SpeculativeDecoder(pair, specrl.StaticController(k)).generate(
                prompt, max_new_tokens=new_tokens
            )
            plain = plain or out.token_ids
            assert out.token_ids == plain, "speculative greedy differs from plain greedy"
            stats.add(out.stats)
    return {"requests": len(prompts), "new_tokens": new_tokens, "load": load_average()} | {
        f"k={k}": stats.to_dict() for k, stats in totals.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shapes", nargs="*", default=["2:8192"], help="LAYERS:KEPT[:HIDDEN] per draft")
    parser.add_argument(
        "--from-card", action="store_true", help="add the fetched pair's draft (its card.json) as a row"
    )
    parser.add_argument("--epochs", type=int, default=None, help="training epochs (default: the preset's)")
    parser.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the preset's)")
    parser.add_argument(
        "--decode", type=int, default=0, help="held-out requests per domain to decode with the fetched pair"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1 while others share the CPU)")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    folder = pair_dir("smollm2")
    target = AutoModelForCausalLM.from_pretrained(folder / "target", dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder / "target")
    costs = json.loads((out / "drafts.json").read_text())["costs"]["1"]["median_ms"]
    base = SOURCES["smollm2"].draft
    report = json.loads((out / "distil.json").read_text()) if (out / "distil.json").is_file() else {}
    for text in args.shapes:
        shape = parse_shape(text)
        settings = replace(base, shape=shape, epochs=args.epochs or base.epochs, lr=args.lr or base.lr)
        _, entry = distil(target, tokenizer, settings, folder / "cache")
        report[f"{shape.label}, {settings.epochs} epochs, lr {settings.lr:g}"] = entry | {
            "command": command_line(),
            "threads": args.threads,
        }
        print(json.dumps({shape.label: entry["agreement"]}), flush=True)
    if args.from_card:
        card = json.loads((folder / "card.json").read_text())
        report[f"specrl fetch: {card['draft']['made']}"] = card["draft"] | {"command": card["command"]}
    decoded = ""
    if args.decode:
        check = decode_check(args.decode)
        report["decode"] = check
        plain = check["k=0"]["decode_tokens_per_s"]
        decoded = (
            "\n\nThe fetched pair in the real loop, greedy, static k, on {} held-out requests ({} tokens "
            "each; every output equal to plain greedy; load {}):\n\n{}\n"
        ).format(
            check["requests"], check["new_tokens"], ", ".join(f"{x:.1f}" for x in check["load"] or []),
            markdown_table(
                ["k", "acceptance rate", "mean acceptance length", "decode tokens/s", "over plain"],
                [[name, f"{r['acceptance_rate']:.3f}", f"{r['mean_acceptance_length']:.2f}",
                  f"{r['decode_tokens_per_s']:.1f}", f"{r['decode_tokens_per_s'] / plain:.2f}x"]
                 for name, r in check.items() if name.startswith("k=")],
            ),
        )  # fmt: skip
    rows = []
    for run, entry in report.items():
        if run == "decode":
            continue
        label = DraftShape(**entry["settings"]["shape"]).label
        alpha = entry["agreement"]["all"]
        ms = costs.get(f"{label}@1")
        gain, k = speedup(costs, label, min(alpha, 0.999)) if ms is not None else (float("nan"), 0)
        rows.append([
            label, entry["settings"]["epochs"], f"{entry['settings']['lr']:g}", entry["steps"],
            f"{entry['seconds']['total'] / 60:.0f}",
            f"{entry['kept_answer_share']:.3f}", f"{entry['agreement_before']['all']:.3f}",
            *(f"{entry['agreement'][d]:.3f}" for d in ("code", "prose", "reasoning", "all")),
            "" if ms is None else f"{ms:.1f} ({ms / costs['target@1']:.0%})", f"{gain:.2f}x (k={k})",
        ])  # fmt: skip
    table = markdown_table(
        ["draft", "epochs", "lr", "steps", "minutes", "kept share", "agreement before", "code", "prose",
         "reasoning", "all", "ms (of target@1)", "expected speed-up"], rows,
    )  # fmt: skip
    markdown = (
        "# SmolLM2-135M-Instruct: distilled drafts\n\nGreedy agreement with the target on held-out "
        "requests after distillation (the acceptance per drafted token of greedy speculative "
        "decoding), the draft's cost at 1 thread and the best expected greedy speed-up it implies:\n\n"
        f"{table}\n{decoded}"
    )
    write_text_atomic(out / "distil.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(out / "distil.md", markdown)
    write_readme(out, Run(
        title="Distilled drafts: agreement and expected speed-up",
        measured="Each draft shape distilled on the same cached greedy answers of the target; agreement "
        "on held-out requests; the speed-up its measured cost and agreement imply.",
        command=command_line(), machine=machine("cpu") | {"dtype": "float32"},
        tables=["distil.md"], data=["distil.json"],
    ))  # fmt: skip
    print(markdown)


if __name__ == "__main__":
    main()
