"""Which draft shape for SmolLM2-135M-Instruct (issue 54 item 2): the cost of one cached forward of
the target (1 and k + 1 tokens) and of candidate drafts (its first layers with its head, a narrow
model, a head over the most frequent tokens only), at 1 and 2 threads, on text at context ~128; the
share of the target's greedy tokens a reduced vocabulary covers; and the speed-up each shape would
give at a given acceptance (greedy, k tokens per iteration, the best k).

    python experiments/smollm2_drafts.py                      # results/smollm2/drafts.{json,md}
    python experiments/smollm2_drafts.py --reps 10 --requests 12   # a quick look

Needs the pair fetched (``specrl fetch smollm2``). Weights of the drafts are random here: a
forward's cost depends on its shape alone.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmarks.result_folder import Run, write_readme  # noqa: E402

import specrl  # noqa: E402
from specrl.engine.cache import KVCache  # noqa: E402
from specrl.io import write_text_atomic  # noqa: E402
from specrl.pretrained.chat import chat_text  # noqa: E402
from specrl.pretrained.draft import DraftShape, make_draft  # noqa: E402
from specrl.pretrained.requests import requests  # noqa: E402
from specrl.provenance import command_line, load_average, machine  # noqa: E402
from specrl.tables import markdown_table  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "results" / "smollm2"
KEPT = (4096, 8192, 16384)
SHAPES = [DraftShape(layers) for layers in (1, 2, 4)]
SHAPES += [DraftShape(layers, kept=kept) for layers in (1, 2, 4) for kept in KEPT]
SHAPES += [DraftShape(layers, hidden=hidden) for layers, hidden in ((2, 256), (4, 256), (2, 384))]
SHAPES += [DraftShape(layers, hidden=hidden, kept=8192) for layers, hidden in ((2, 256), (4, 256), (2, 384))]
ACCEPTANCE = (0.5, 0.6, 0.7, 0.8)
K_MAX = 8


def forward_costs(
    pair, drafts: dict[str, torch.nn.Module], context: list[int], reps: int
) -> dict[str, float]:
    """Median milliseconds of one cached forward at ``len(context)`` tokens: the target over 1..K_MAX+1
    new tokens, each draft over 1; interleaved rep by rep, after 3 warm-up reps."""
    n_context = len(context) - K_MAX - 1
    tokens = torch.tensor([context])
    caches = {"target": KVCache(pair.target, pair.vocab_size)} | {
        name: KVCache(model, pair.vocab_size) for name, model in drafts.items()
    }
    for cache in caches.values():
        cache.feed(tokens[:, :n_context])
    cases = [("target", n) for n in range(1, K_MAX + 2)] + [(name, 1) for name in drafts]
    times: dict[tuple[str, int], list[float]] = {case: [] for case in cases}
    for rep in tqdm(range(3 + reps), desc="forwards", unit="rep", leave=False):
        for name, n in cases:
            start = time.perf_counter()
            caches[name].feed(tokens[:, n_context : n_context + n], keep=n)
            elapsed = time.perf_counter() - start
            caches[name].rollback([n_context])
            if rep >= 3:
                times[(name, n)].append(elapsed)
    return {f"{name}@{n}": 1000 * statistics.median(values) for (name, n), values in times.items()}


def speedup(ms: dict[str, float], draft: str, acceptance: float) -> tuple[float, int]:
    """The best expected greedy speed-up over plain decoding, and its k: an iteration drafts k tokens
    (k draft forwards) and verifies them in one target forward over k + 1; each drafted token is
    accepted with probability ``acceptance`` until the first rejection."""
    best = (0.0, 0)
    for k in range(1, K_MAX + 1):
        tokens = (1 - acceptance ** (k + 1)) / (1 - acceptance)
        seconds = k * ms[f"{draft}@1"] + ms[f"target@{k + 1}"]
        best = max(best, (tokens * ms["target@1"] / seconds, k))
    return best


def greedy_tokens(pair, messages: list[str], new_tokens: int, batch: int) -> list[list[int]]:
    """The target's greedy continuation of each chat request (HF generate, left-padded batches)."""
    tokenizer = pair.tokenizer
    tokenizer.padding_side = "left"
    out = []
    for start in tqdm(range(0, len(messages), batch), desc="target greedy", unit="batch", leave=False):
        texts = [chat_text(tokenizer, m) for m in messages[start : start + batch]]
        encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            ids = pair.target.generate(**encoded, max_new_tokens=new_tokens, do_sample=False)
        for row in ids[:, encoded["input_ids"].shape[1] :].tolist():
            out.append([t for t in row if t != tokenizer.pad_token_id])
    return out


def coverage(train: list[list[int]], heldout: list[list[int]]) -> dict[int, float]:
    """The share of the held-out greedy tokens among the ``kept`` most frequent training tokens."""
    counts = collections.Counter(t for row in train for t in row)
    tokens = [t for row in heldout for t in row]
    shares = {}
    for kept in KEPT:
        top = {t for t, _ in counts.most_common(kept)}
        shares[kept] = sum(t in top for t in tokens) / len(tokens)
    return shares | {"distinct_train_tokens": len(counts)}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--reps", type=int, default=15, help="timed forwards per case (median)")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch threads to time at")
    parser.add_argument("--requests", type=int, default=48, help="train requests per domain for coverage")
    parser.add_argument("--new-tokens", type=int, default=96, help="greedy tokens per request")
    parser.add_argument("--out", default=str(OUT))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pair = specrl.load_pair(preset="smollm2", device="cpu")
    torch.manual_seed(0)
    drafts = {
        shape.label: make_draft(pair.target, shape, list(range(shape.kept or 0)) or None) for shape in SHAPES
    }
    sets = requests(0, per_domain=args.requests, evaluation=args.requests // 2)
    context = pair.encode(pair.chat(sets["test"]["code"][0]))
    context = (context * (256 // len(context) + 1))[: 128 + K_MAX + 1]
    report: dict = {"command": command_line(), "context": 128, "reps": args.reps, "costs": {}}
    for threads in args.threads:
        torch.set_num_threads(threads)
        load = load_average()
        ms = forward_costs(pair, drafts, context, args.reps)
        report["costs"][threads] = {"load_before": load, "load_after": load_average(), "median_ms": ms}
    torch.set_num_threads(1)
    train = [m for d in sets["train"].values() for m in d]
    heldout = [m for d in sets["test"].values() for m in d]
    report["coverage"] = coverage(
        greedy_tokens(pair, train, args.new_tokens, 8), greedy_tokens(pair, heldout, args.new_tokens, 8)
    )
    report["machine"] = machine("cpu") | {"dtype": "float32"}

    rows = []
    for threads, cost in report["costs"].items():
        ms = cost["median_ms"]
        for name in drafts:
            gains = [speedup(ms, name, a) for a in ACCEPTANCE]
            rows.append([threads, name, f"{ms[name + '@1']:.1f}", f"{ms[name + '@1'] / ms['target@1']:.0%}"]
                        + [f"{g:.2f}x (k={k})" for g, k in gains])  # fmt: skip
    table = markdown_table(
        ["threads", "draft", "ms", "of target@1"] + [f"speed-up at {a}" for a in ACCEPTANCE], rows
    )
    target_rows = [
        [threads, *(f"{c['median_ms'][f'target@{n}']:.1f}" for n in (1, 2, 5, 9)),
         ", ".join(f"{x:.2f}" for x in c["load_before"] or [])]
        for threads, c in report["costs"].items()
    ]  # fmt: skip
    targets = markdown_table(
        ["threads", "target@1 ms", "@2", "@5", "@9", "load before (1, 5, 15 min)"], target_rows
    )
    cover = markdown_table(
        ["kept tokens", "share of held-out greedy tokens"],
        [[kept, f"{report['coverage'][kept]:.3f}"] for kept in KEPT],
    )
    markdown = "\n\n".join([
        "# SmolLM2-135M-Instruct: draft shapes", f"Target forward, context 128:\n\n{targets}",
        "Drafts (one token), and the best expected greedy speed-up over k = 1..8 at each acceptance "
        f"per drafted token:\n\n{table}",
        f"Vocabulary coverage (top tokens of {len(train)} training requests' greedy text, "
        f"{args.new_tokens} tokens each; held out: {len(heldout)} test requests):\n\n{cover}",
    ])  # fmt: skip
    write_text_atomic(out / "drafts.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(out / "drafts.md", markdown + "\n")
    write_readme(out, Run(
        title="Draft shapes: cost and expected speed-up",
        measured="One cached forward of the target and of candidate drafts (random weights, exact shapes), "
        "the vocabulary a reduced head covers, and the speed-up each shape would give at a given acceptance.",
        command=report["command"], machine=report["machine"], tables=["drafts.md"], data=["drafts.json"],
    ))  # fmt: skip
    print(markdown)


if __name__ == "__main__":
    main()
