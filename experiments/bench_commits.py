"""Decoding speed of two commits of specrl, interleaved in one run: is a change as fast as before?

Each commit is checked out into its own git worktree (under ``--work``), and one worker process of
each loads the embedded pair there and warms up every configuration. Then the driver alternates
between the two workers generation by generation (which of them goes first alternates too), so
that the machine's drift, which on these VMs moves throughput by tens of percent within a minute,
hits both alike. A configuration is a static k of ``--k-values`` and a batch size of ``--batches``
(B = 1: one prompt at a time; B > 1: B prompts decoded together), timed through the public API both
commits share, ``SpeculativeDecoder.generate``, on the same test prompts. A configuration's figure
per round is tokens over seconds summed over its prompts; the ratio new / old is paired within the
round, and the table gives the median ratio over rounds and twice the standard error of the mean
log-ratio (a margin below it is a tie).

    python experiments/bench_commits.py --old HEAD~1 --new HEAD      # about 10 minutes on 2 cores
    python experiments/bench_commits.py --old main --new WORKTREE    # WORKTREE: this checkout as it is

Writes ``commits.json`` and ``commits.md`` to ``--out`` (default ``results/bench_commits/``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

from specrl.io import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", default="HEAD", help="the reference commit")
    parser.add_argument("--new", default="WORKTREE", help="the commit to compare; WORKTREE: this checkout")
    parser.add_argument("--rounds", type=int, default=6, help="interleaved rounds, each running both commits")
    parser.add_argument("--k-values", type=int, nargs="+", default=[0, 3, 5])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--domains", nargs="+", default=["code", "prose"])
    parser.add_argument("--prompts-per-domain", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--work", type=Path, default=Path("/tmp/specrl-bench-commits"))
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench_commits")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


# ---- the worker: runs inside one commit's worktree, one generation per line it is sent --------------


def worker(args: argparse.Namespace) -> None:
    """Load the pair, warm up every configuration, then answer each line ``k batch group`` with the
    line ``tokens seconds`` of that group's generation."""
    import torch

    import specrl

    torch.set_num_threads(int(os.environ.get("SPECRL_BENCH_THREADS", torch.get_num_threads())))
    pair = specrl.load_pair()
    texts = pair.prompts["test"]
    chosen = [text for domain in args.domains for text in texts[domain][: args.prompts_per_domain]]
    prompts = [pair.encode(text)[-160:] for text in chosen]
    decoders = {k: specrl.SpeculativeDecoder(pair, specrl.StaticController(k)) for k in args.k_values}
    for k in args.k_values:
        for batch in args.batches:
            decoders[k].generate(prompts[:batch], max_new_tokens=args.max_new_tokens, stop_at_eos=False)
    print("ready", flush=True)
    for line in sys.stdin:
        k, batch, group = (int(x) for x in line.split())
        rows = prompts[group * batch : (group + 1) * batch]
        begin = time.perf_counter()
        outs = decoders[k].generate(rows, max_new_tokens=args.max_new_tokens, stop_at_eos=False)
        seconds = time.perf_counter() - begin
        print(sum(len(out.token_ids) for out in outs), seconds, flush=True)


# ---- the driver -------------------------------------------------------------------------------------


def checkout(rev: str, work: Path) -> Path:
    if rev == "WORKTREE":
        return ROOT
    path = work / rev.replace("/", "_").replace("~", "-")
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True)
    return path


def start_worker(tree: Path, args: argparse.Namespace) -> subprocess.Popen:
    command = [sys.executable, str(ROOT / "experiments" / "bench_commits.py"), "--worker"]
    command += ["--k-values", *map(str, args.k_values), "--batches", *map(str, args.batches)]
    command += ["--domains", *args.domains, "--prompts-per-domain", str(args.prompts_per_domain)]
    command += ["--max-new-tokens", str(args.max_new_tokens)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    process = subprocess.Popen(
        command,
        cwd=tree,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    if process.stdout.readline().strip() != "ready":
        raise SystemExit(f"the worker of {tree} did not start")
    return process


def generation(process: subprocess.Popen, k: int, batch: int, group: int) -> tuple[int, float]:
    process.stdin.write(f"{k} {batch} {group}\n")
    process.stdin.flush()
    tokens, seconds = process.stdout.readline().split()
    return int(tokens), float(seconds)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    trees = {"old": checkout(args.old, args.work), "new": checkout(args.new, args.work)}
    workers = {name: start_worker(tree, args) for name, tree in trees.items()}
    groups = len(args.domains) * args.prompts_per_domain
    configs = [(k, batch) for k in args.k_values for batch in args.batches]
    rng = random.Random(0)
    rounds, turn = [], 0
    for index in range(args.rounds):
        totals = {name: {f"k={k} B={b}": [0, 0.0] for k, b in configs} for name in workers}
        for k, batch in rng.sample(configs, len(configs)):
            for group in range(groups // batch):
                order = ("old", "new") if turn % 2 == 0 else ("new", "old")
                turn += 1
                for name in order:
                    tokens, seconds = generation(workers[name], k, batch, group)
                    totals[name][f"k={k} B={batch}"][0] += tokens
                    totals[name][f"k={k} B={batch}"][1] += seconds
        measured = {name: {key: t / s for key, (t, s) in by.items()} for name, by in totals.items()}
        rounds.append(measured)
        print(f"round {index + 1}/{args.rounds}: " + ", ".join(
            f"{key} {measured['new'][key] / measured['old'][key]:.3f}" for key in measured["new"]
        ), flush=True)  # fmt: skip
    for process in workers.values():
        process.stdin.close()
        process.wait()
    summary = {}
    for key in rounds[0]["new"]:
        logs = [math.log(r["new"][key] / r["old"][key]) for r in rounds]
        se = statistics.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else float("nan")
        summary[key] = {
            "median_ratio": statistics.median(math.exp(x) for x in logs),
            "mean_ratio": math.exp(statistics.fmean(logs)),
            "two_se": 2 * se,
            "old_tokens_per_s": statistics.median(r["old"][key] for r in rounds),
            "new_tokens_per_s": statistics.median(r["new"][key] for r in rounds),
        }
    args.out.mkdir(parents=True, exist_ok=True)
    record = {"old": args.old, "new": args.new, "args": {k: str(v) for k, v in vars(args).items()},
              "rounds": rounds, "summary": summary, "machine": machine()}  # fmt: skip
    write_text_atomic(args.out / "commits.json", json.dumps(record, indent=1) + "\n")
    lines = [
        f"# Decoding speed: {args.new} against {args.old}",
        "",
        f"`python experiments/bench_commits.py --old {args.old} --new {args.new}`; {args.rounds} rounds, the "
        f"two commits alternating generation by generation; {len(args.domains)} domains x "
        f"{args.prompts_per_domain} test prompts, {args.max_new_tokens} new tokens each, greedy; "
        f"machine: {record['machine']}. Ratio: new / old tokens per second within a round, median over "
        "rounds; "
        "2 SE: twice the standard error of the mean log-ratio (a margin below it is a tie).",
        "",
        "| static k, batch | old tokens/s | new tokens/s | new / old (median) | 2 SE (log) |",
        "|---|---|---|---|---|",
    ]
    for key, row in summary.items():
        lines.append(
            f"| {key} | {row['old_tokens_per_s']:.1f} | {row['new_tokens_per_s']:.1f} | "
            f"{row['median_ratio']:.3f} | {row['two_se']:.3f} |"
        )
    write_text_atomic(args.out / "commits.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


def machine() -> str:
    from specrl.latency.store import cpu_name

    return f"{cpu_name().strip()}, {os.cpu_count()} cores"


if __name__ == "__main__":
    main()
