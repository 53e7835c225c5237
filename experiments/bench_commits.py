"""Decoding speed of two commits of specrl, interleaved in one run: is a change as fast as before?

Each commit is checked out into its own git worktree (under ``--work``). Then, round by round, a
worker process of each commit (in an order that alternates every round) loads the embedded pair,
warms up, and times ``SpeculativeDecoder.generate`` through the public API both commits share, on
the same test prompts, at every static k of ``--k-values`` and every batch size of ``--batches``
(B = 1: one prompt at a time; B > 1: B prompts decoded together). A configuration's figure per
round is tokens over seconds summed over its prompts; the ratio new / old is paired within the
round, and the table gives the median ratio over rounds and twice the standard error of the
mean log-ratio (a margin below it is a tie).

    python experiments/bench_commits.py --old HEAD~1 --new HEAD      # about 10 minutes on 2 cores
    python experiments/bench_commits.py --old main --new WORKTREE    # WORKTREE: this checkout as it is

Writes ``commits.json`` and ``commits.md`` to ``--out`` (default ``results/bench_commits/``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

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


# ---- the worker: runs inside one commit's worktree ------------------------------------------------


def worker(args: argparse.Namespace) -> None:
    """Time every configuration once (after an untimed warm-up of each); print JSON."""
    import torch

    import specrl

    torch.set_num_threads(int(os.environ.get("SPECRL_BENCH_THREADS", torch.get_num_threads())))
    pair = specrl.load_pair()
    texts = pair.prompts["test"]
    prompts = [
        pair.encode(text)[-160:]
        for domain in args.domains
        for text in texts[domain][: args.prompts_per_domain]
    ]
    results = {}
    for timed in (False, True):  # the warm-up decodes each configuration's first group only
        for k in args.k_values:
            decoder = specrl.SpeculativeDecoder(pair, specrl.StaticController(k))
            for batch in args.batches:
                tokens, seconds = 0, 0.0
                for start in range(0, len(prompts) if timed else 1, batch):
                    group = prompts[start : start + batch]
                    begin = time.perf_counter()
                    outs = decoder.generate(group, max_new_tokens=args.max_new_tokens, stop_at_eos=False)
                    seconds += time.perf_counter() - begin
                    tokens += sum(len(out.token_ids) for out in outs)
                if timed:
                    results[f"k={k} B={batch}"] = tokens / seconds
    print(json.dumps(results))


# ---- the driver -------------------------------------------------------------------------------------


def checkout(rev: str, work: Path) -> Path:
    if rev == "WORKTREE":
        return ROOT
    path = work / rev.replace("/", "_").replace("~", "-")
    if not path.exists():
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(path), rev], check=True)
    return path


def run_worker(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    command = [sys.executable, str(ROOT / "experiments" / "bench_commits.py"), "--worker"]
    command += ["--k-values", *map(str, args.k_values), "--batches", *map(str, args.batches)]
    command += ["--domains", *args.domains, "--prompts-per-domain", str(args.prompts_per_domain)]
    command += ["--max-new-tokens", str(args.max_new_tokens)]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run(command, cwd=tree, env=env, check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.worker:
        worker(args)
        return
    trees = {"old": checkout(args.old, args.work), "new": checkout(args.new, args.work)}
    rounds = []
    for index in range(args.rounds):
        order = ("old", "new") if index % 2 == 0 else ("new", "old")
        measured = {name: run_worker(trees[name], args) for name in order}
        rounds.append(measured)
        print(f"round {index + 1}/{args.rounds}: " + ", ".join(
            f"{key} {measured['new'][key] / measured['old'][key]:.3f}" for key in measured["new"]
        ), flush=True)  # fmt: skip
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
    (args.out / "commits.json").write_text(json.dumps(record, indent=1) + "\n")
    lines = [
        f"# Decoding speed: {args.new} against {args.old}",
        "",
        f"`python experiments/bench_commits.py --old {args.old} --new {args.new}`; {args.rounds} interleaved "
        f"rounds, {len(args.domains)} domains x {args.prompts_per_domain} test prompts, "
        f"{args.max_new_tokens} new tokens each, greedy; machine: {record['machine']}.",
        "",
        "| static k, batch | old tokens/s | new tokens/s | new / old (median) | 2 SE (log) |",
        "|---|---|---|---|---|",
    ]
    for key, row in summary.items():
        lines.append(
            f"| {key} | {row['old_tokens_per_s']:.1f} | {row['new_tokens_per_s']:.1f} | "
            f"{row['median_ratio']:.3f} | {row['two_se']:.3f} |"
        )
    (args.out / "commits.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def machine() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        model = "unknown CPU"
    return f"{model}, {os.cpu_count()} cores"


if __name__ == "__main__":
    main()
