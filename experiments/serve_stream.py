"""Serve a request stream whose domain shifts, with the draft frozen and with the draft adapted online.

Setups, all on the same requests in the same order with the same seeds (:mod:`specrl.serving`):

  plain                    the target alone (k = 0): the reference;
  frozen + tcp             the shipped draft, the TCP-like heuristic;
  adapted + tcp            the draft re-distilled every ``adaptation.every`` requests, TCP;
  frozen + learned         the shipped draft, the exported PPO policy (``--policy``);
  adapted + learned        the adapted draft, the PPO policy.

Each request is served by every setup in turn (the order rotates per request), one request at a
time, after an untimed warm-up. Every ``adaptation.every`` requests an adapted setup checks its
draft and, when its acceptance on those requests is below ``adaptation.adapt_below``, re-distils it
in between requests: serving pauses while it runs, and its wall time counts in that setup's
tokens/s. Greedy outputs are the same in every setup (checked here, and in
``tests/test_serving.py``), because the output of speculative decoding never depends on the draft.
The adaptation settings of the shipped stream were chosen on its validation split
(results/stream_validation/).

Run from the repository root (offline, on the embedded default pair; 21 minutes on 2 CPU
cores for the three seeds):

    python experiments/serve_stream.py                         # test split, seeds 0, 1, 2: the reported run
    python experiments/serve_stream.py --seeds 0 --out /tmp/stream                       # one seed
    python experiments/serve_stream.py --preset tiny --seeds 0 --stream FILE --out /tmp/stream  # seconds

Writes, per seed, ``OUT/seed<N>/stream.json`` (every request of every setup, every adaptation, the
summary, the machine), ``stream.md`` and ``stream.png``, and ``OUT/stream.md`` with the seeds side by
side (one seed: its files straight in ``OUT``); TensorBoard scalars (``specdec/stream/*``) under
``runs/stream__<stream>__<split>__seed<N>__<time>/<setup>``. The runs and pages live in
experiments/benchmarks/stream.py, stream_tables.py and stream_page.py.
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import torch
from benchmarks.stream import seeds_with_different_outputs, serve_seed
from benchmarks.stream_page import render, spread_markdown, write_readme_of, write_seed

from specrl.controllers import LearnedController, TCPController
from specrl.evaluation.machine import warn_if_busy
from specrl.io import write_text_atomic
from specrl.serving import load_stream

REPO = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", default="code_math_prose", help="a shipped stream's name or a YAML path")
    parser.add_argument(
        "--split", default=None, help="override the stream's prompt split (validation: tuning)"
    )
    parser.add_argument(
        "--preset", default=None, help="override the stream's embedded pair preset (tiny: tests)"
    )
    parser.add_argument(
        "--policy", default="default", help="the learned controller: a shipped name or a folder"
    )
    parser.add_argument("--controllers", default="tcp,learned", help="comma-separated: tcp, learned")
    parser.add_argument("--requests", type=int, default=None, help="serve only the first N requests")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated stream seeds (one page each)")
    parser.add_argument("--every", type=int, default=None, help="override adaptation.every")
    parser.add_argument("--steps", type=int, default=None, help="override adaptation.steps")
    parser.add_argument(
        "--out", default=str(REPO / "results" / "stream"), help="folder for stream.json, .md, .png"
    )
    parser.add_argument("--runs", default="runs", help="folder for the TensorBoard runs")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument(
        "--render", action="store_true", help="only rewrite OUT's pages and plots from its stream.json files"
    )
    parser.add_argument("--no-progress", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    if args.render:
        return render(Path(args.out))
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    spec = load_stream(args.stream).with_split(args.split)
    if args.preset is not None:
        spec = replace(spec, pair=replace(spec.pair, preset=args.preset))
    overrides = {k: v for k, v in (("every", args.every), ("steps", args.steps)) if v is not None}
    if overrides:
        spec = replace(spec, adaptation=replace(spec.adaptation, **overrides))
    pair = spec.pair.load()
    warn_if_busy(pair)
    factories = {"tcp": TCPController, "learned": lambda: LearnedController.load(args.policy)}
    names = [name.strip() for name in args.controllers.split(",") if name.strip()]
    if unknown := [n for n in names if n not in factories]:
        raise SystemExit(f"unknown controller(s) {unknown}; choose from {sorted(factories)}")
    seeds = [int(seed) for seed in args.seeds.split(",")]

    out, reports = Path(args.out), []
    for seed in seeds:
        chosen = {n: factories[n] for n in names}
        report = serve_seed(
            pair, replace(spec, seed=seed), chosen, args.requests, Path(args.runs), not args.no_progress
        )
        print(write_seed(report, out / f"seed{seed}" if len(seeds) > 1 else out))
        reports.append(report)
    if len(seeds) > 1:
        page = spread_markdown(reports)
        write_text_atomic(out / "stream.md", page)
        print(page)
    write_readme_of(out, reports)
    if bad := seeds_with_different_outputs(reports):
        raise SystemExit(f"greedy outputs differ from plain decoding for seed(s) {bad}")
    return reports


if __name__ == "__main__":
    main()
