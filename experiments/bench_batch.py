"""Batched speculative decoding measured in the real loop: speed-up over plain batched decoding by
batch size and k, and acceptance per row.

For every batch size B of ``--batch-sizes`` and every k of ``--ks`` (k = 0 is plain batched
decoding: one target forward per token for the whole batch), the default pair decodes B test
prompts together (the test prompts of every domain, in turn, so a batch mixes domains as served
traffic does) with ``StaticController(k)``. Within a pass every (B, k) runs once, in a shuffled
(seeded) order, so machine noise hits all alike; one untimed warm-up pass first. Reported per
(B, k):

- tokens/s summed over rows (every row's new tokens over the batch's time, prefill included),
  the median over passes;
- the speed-up over plain batched decoding at the same B: the median over passes of the ratio
  within a pass;
- acceptance per row (accepted / proposed of each row; mean, min and max over rows). Exact
  speculative sampling says it does not depend on B: a greedy row accepts exactly what its
  prompt accepts alone (``tests/test_batch.py``). What B changes is the cost: verification
  scores B x (k + 1) tokens per step, and the draft runs B rows per forward.

Every output is checked token for token against plain batched decoding (greedy).

Run from the repository root (offline, on the embedded default pair):

    python experiments/bench_batch.py                # results/batch/batch.{json,md,png}
    python experiments/bench_batch.py --quick        # a minute: B 1 and 4, k 0 and 3, 8 tokens

A benchmark, not a test: the ratios are the claim, measured on this machine.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
from pathlib import Path

import specrl
from specrl.evaluation.machine import origin_line, pair_info, result_origin
from specrl.io import write_report
from specrl.tables import markdown_table

REPO = Path(__file__).resolve().parent.parent
DOMAINS = ("code", "prose", "math")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32,64", help="comma-separated batch sizes")
    parser.add_argument("--ks", default="0,1,2,3,4,5,6,7,8", help="comma-separated k (0: plain decoding)")
    parser.add_argument("--max-new-tokens", type=int, default=32, help="tokens per row")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved passes; medians over them")
    parser.add_argument("--seed", type=int, default=0, help="seed of the configuration order")
    parser.add_argument("--preset", default="small", help="embedded pair (small, or tiny for a smoke test)")
    parser.add_argument("--out", default=str(REPO / "results" / "batch"), help="output folder")
    parser.add_argument("--render", action="store_true", help="rewrite the page and plot from the JSON")
    parser.add_argument("--quick", action="store_true", help="B 1 and 4, k 0 and 3, 8 tokens, 1 pass")
    args = parser.parse_args(argv)
    if args.quick:
        args.batch_sizes, args.ks, args.max_new_tokens, args.repeats = "1,4", "0,3", 8, 1
    return args


def test_prompts(pair: specrl.ModelPair) -> list[list[int]]:
    """The test prompts of every domain, interleaved (code, prose, math, code, ...)."""
    by_domain = [
        [pair.encode(t) for t in pair.prompts["test"][d]] for d in DOMAINS if d in pair.prompts["test"]
    ]
    return [p for group in zip(*by_domain, strict=False) for p in group]


def call(pair: specrl.ModelPair, prompts: list[list[int]], k: int, max_new_tokens: int) -> dict:
    outputs = specrl.SpeculativeDecoder(pair, specrl.StaticController(k)).generate(
        prompts, max_new_tokens=max_new_tokens
    )
    stats = outputs.stats
    return {
        "ids": ids_digest([output.token_ids for output in outputs]),  # compared across k: lossless
        "tokens": stats.new_tokens,
        "seconds": stats.seconds,
        "draft_seconds": stats.draft_seconds,
        "verify_seconds": stats.verify_seconds,
        "steps": stats.steps,
        # row i is prompt i of the pool (None: the row proposed nothing)
        "row_acceptance": [
            output.stats.acceptance_rate if output.stats.proposed else None for output in outputs
        ],
    }


def ids_digest(ids: list[list[int]]) -> str:
    """A fingerprint of every row's output (the JSON keeps it instead of the tokens)."""
    return hashlib.sha256(json.dumps(ids).encode()).hexdigest()[:16]


def measure(
    pair, batch_sizes: list[int], ks: list[int], max_new_tokens: int, repeats: int, seed: int
) -> list[dict]:
    """Every (B, k) once per pass, shuffled, after an untimed warm-up pass."""
    from tqdm.auto import tqdm

    pool = test_prompts(pair)
    batches = {b: [pool[i % len(pool)] for i in range(b)] for b in batch_sizes}
    configs = [(b, k) for b in batch_sizes for k in ks]
    for b, k in configs:  # warm-up: allocator, kernels at every shape
        call(pair, batches[b][: min(b, 2)], k, 4)
    order, runs = random.Random(seed), []
    progress = tqdm(total=repeats * len(configs), desc="batch", unit="batch", mininterval=5.0)
    for repeat in range(repeats):
        for b, k in order.sample(configs, len(configs)):
            runs.append({"repeat": repeat, "batch": b, "k": k, **call(pair, batches[b], k, max_new_tokens)})
            progress.update()
    progress.close()
    return runs


def summarise(runs: list[dict], batch_sizes: list[int], ks: list[int]) -> dict:
    """Per (B, k): median tokens/s, speed-up over plain at the same B, per-row acceptance; lossless check."""
    by = {(r["batch"], r["k"], r["repeat"]): r for r in runs}
    repeats = sorted({r["repeat"] for r in runs})
    table: dict[str, dict] = {}
    for b in batch_sizes:
        row: dict[str, dict] = {}
        for k in ks:
            mine = [by[(b, k, rep)] for rep in repeats]
            plain = [by[(b, 0, rep)] for rep in repeats] if 0 in ks else None
            acceptance = [a for run in mine for a in run["row_acceptance"] if a is not None]
            row[str(k)] = {
                "tokens_per_s": statistics.median(run["tokens"] / run["seconds"] for run in mine),
                "speedup": statistics.median(
                    (m["tokens"] / m["seconds"]) / (p["tokens"] / p["seconds"])
                    for m, p in zip(mine, plain, strict=True)
                )
                if plain
                else None,
                "row_acceptance_mean": statistics.mean(acceptance) if acceptance else None,
                "row_acceptance_min": min(acceptance) if acceptance else None,
                "row_acceptance_max": max(acceptance) if acceptance else None,
                "verify_ms_per_step": 1e3
                * statistics.median(run["verify_seconds"] / run["steps"] for run in mine),
                "lossless": all(run["ids"] == p["ids"] for run, p in zip(mine, plain, strict=True))
                if plain
                else None,
            }
        best = max((k for k in ks if k), key=lambda k: row[str(k)]["speedup"] or 0.0, default=None)
        table[str(b)] = {"ks": row, "best_k": best}
    return table


def same_prompt_spread(runs: list[dict], ks: list[int]) -> dict[str, float]:
    """Per k: the largest difference, over prompts, between one prompt's acceptance at two batch
    sizes (row i of every batch is prompt i). Exact speculative sampling says 0 for greedy rows."""
    spread = {}
    for k in ks:
        if not k:
            continue
        by_prompt: dict[int, list[float]] = {}
        for run in runs:
            if run["k"] == k:
                for i, a in enumerate(run["row_acceptance"]):
                    if a is not None:
                        by_prompt.setdefault(i, []).append(a)
        shared = [values for values in by_prompt.values() if len(values) > 1]
        spread[str(k)] = max((max(v) - min(v) for v in shared), default=0.0)
    return spread


def markdown(report: dict) -> str:
    table, config = report["table"], report["config"]
    ks, sizes = config["ks"], config["batch_sizes"]
    spec = [k for k in ks if k]
    lines = [
        f"# Batched speculative decoding on {report['pair']['name']}",
        "",
        "Greedy decoding of B test prompts together (the domains in turn), "
        f"{config['max_new_tokens']} tokens a row, `StaticController(k)`; {config['repeats']} interleaved "
        "passes, medians. Speed-up: tokens/s summed over rows over plain batched decoding (k = 0) at "
        "the same B, in the same pass.",
        "",
        "## Speed-up over plain batched decoding",
        "",
    ]
    rows = []
    for b in sizes:
        entry = table[str(b)]
        cells = [b, f"{entry['ks']['0']['tokens_per_s']:.0f}" if "0" in entry["ks"] else "-"]
        for k in spec:
            value = entry["ks"][str(k)]["speedup"]
            mark = "**" if k == entry["best_k"] else ""
            cells.append(f"{mark}{value:.2f}{mark}" if value is not None else "-")
        rows.append(cells)
    lines += [markdown_table(["B", "plain tok/s", *[f"k={k}" for k in spec]], rows), ""]
    lines += ["Bold: the best k at that batch size.", "", "## Acceptance per row", ""]
    rows = []
    for b in sizes:
        cells = [b]
        for k in spec:
            e = table[str(b)]["ks"][str(k)]
            mean, low, high = e["row_acceptance_mean"], e["row_acceptance_min"], e["row_acceptance_max"]
            cells.append(f"{mean:.3f} ({low:.2f}-{high:.2f})" if mean is not None else "-")
        rows.append(cells)
    spread = report["same_prompt_spread"]
    lines += [
        "Mean over rows of each row's accepted / proposed (min-max over rows). A larger batch adds "
        "other prompts (row i is test prompt i), so the mean moves with the prompts it holds; the "
        "same prompt's acceptance at different batch sizes differs by at most "
        + ", ".join(f"{spread[str(k)]:.3f} (k={k})" for k in spec)
        + ": batching does not change what a row accepts.",
        "",
        markdown_table(["B", *[f"k={k}" for k in spec]], rows),
        "",
        "## Verification cost per step (ms)",
        "",
        markdown_table(
            ["B", *[f"k={k}" for k in ks]],
            [[b, *[f"{table[str(b)]['ks'][str(k)]['verify_ms_per_step']:.1f}" for k in ks]] for b in sizes],
        ),
        "",
    ]
    lossless = all(e["lossless"] in (None, True) for entry in table.values() for e in entry["ks"].values())
    lines += [
        f"Every output equals plain batched decoding token for token: {'yes' if lossless else 'NO'}.",
        "",
        origin_line(report),
        "",
    ]
    return "\n".join(lines)


def plot(report: dict, path: Path) -> None:
    import matplotlib.pyplot as plt

    from specrl.plots import save_figure

    table, config = report["table"], report["config"]
    sizes = config["batch_sizes"]
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    cmap = plt.get_cmap("viridis")
    spec = [k for k in config["ks"] if k]
    for i, k in enumerate(spec):
        values = [table[str(b)]["ks"][str(k)]["speedup"] for b in sizes]
        ax.plot(sizes, values, marker="o", label=f"k={k}", color=cmap(i / max(1, len(spec) - 1)))
    ax.axhline(1.0, color="black", linestyle="--", linewidth=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xticks(sizes, [str(b) for b in sizes])
    ax.set_xlabel("batch size")
    ax.set_ylabel("speed-up over plain batched decoding")
    ax.set_title(f"Batched speculative decoding on {report['pair']['name']}")
    ax.legend(fontsize=8, ncol=3)
    save_figure(fig, path)


def write(report: dict, out: Path) -> None:
    write_report(out / "batch", report, markdown(report))
    plot(report, out / "batch.png")


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    out = Path(args.out)
    if args.render:
        report = json.loads((out / "batch.json").read_text())
        config = report["config"]
        report["table"] = summarise(report["runs"], config["batch_sizes"], config["ks"])
        report["same_prompt_spread"] = same_prompt_spread(report["runs"], config["ks"])
        write(report, out)
        return report
    batch_sizes = [int(b) for b in args.batch_sizes.split(",")]
    ks = [int(k) for k in args.ks.split(",")]
    if 0 not in ks:
        ks = [0, *ks]  # plain batched decoding is every speed-up's reference
    pair = specrl.load_pair(preset=args.preset)
    runs = measure(pair, batch_sizes, ks, args.max_new_tokens, args.repeats, args.seed)
    report = {
        "table": summarise(runs, batch_sizes, ks),
        "same_prompt_spread": same_prompt_spread(runs, ks),
        "config": {"batch_sizes": batch_sizes, "ks": ks, "max_new_tokens": args.max_new_tokens,
                   "repeats": args.repeats, "seed": args.seed},
        "pair": pair_info(pair),
        **result_origin(pair),
        "runs": runs,
    }  # fmt: skip
    write(report, out)
    print(markdown(report))
    return report


if __name__ == "__main__":
    main()
