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
The adaptation settings of the shipped stream were chosen on its validation split by
``experiments/tune_adaptation.py``.

Run from the repository root (offline, on the embedded default pair; 21 minutes on 2 CPU
cores for the three seeds):

    python experiments/serve_stream.py                         # test split, seeds 0, 1, 2: the reported run
    python experiments/serve_stream.py --seeds 0 --out /tmp/stream                       # one seed
    python experiments/serve_stream.py --preset tiny --seeds 0 --stream FILE --out /tmp/stream  # seconds

Writes, per seed, ``OUT/seed<N>/stream.json`` (every request of every setup, every adaptation, the
summary, the machine), ``stream.md`` and ``stream.png``, and ``OUT/stream.md`` with the seeds side by
side (one seed: its files straight in ``OUT``); TensorBoard scalars (``specdec/stream/*``) under
``runs/stream__<stream>__<split>__seed<N>__<time>/<setup>``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch

from specrl.controllers import LearnedController, StaticController, TCPController
from specrl.evaluation.machine import (
    command_line,
    describe_commit,
    describe_machine,
    machine_info,
    pair_info,
    warn_if_busy,
)
from specrl.io import write_text_atomic
from specrl.serving import Setup, build_setups, draw_requests, load_stream, serve_stream
from specrl.serving.adaptation import LiveDraft
from specrl.serving.stream_report import StreamScalars, markdown, plot, summarize
from specrl.tables import markdown_table


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
    parser.add_argument("--out", default="results/stream", help="folder for stream.json, .md, .png")
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
        seeded = replace(spec, seed=seed)
        folder = out / f"seed{seed}" if len(seeds) > 1 else out
        reports.append(serve_one(pair, seeded, {n: factories[n] for n in names}, args, folder))
    if len(seeds) > 1:
        page = spread_markdown(reports)
        write_text_atomic(out / "stream.md", page)
        print(page)
    identical = [r["outputs_identical_to_plain"] for r in reports]
    bad = [
        r["stream"]["seed"]
        for r, same in zip(reports, identical, strict=True)
        if same and not all(same.values())
    ]
    if bad:
        raise SystemExit(f"greedy outputs differ from plain decoding for seed(s) {bad}")
    return reports


def render(out: Path) -> list[dict]:
    """Rewrite the pages and plots of a finished run from its JSON files (no decoding)."""
    files = sorted(out.glob("seed*/stream.json")) or [out / "stream.json"]
    reports = [json.loads(path.read_text()) for path in files]
    for path, report in zip(files, reports, strict=True):
        write_text_atomic(path.parent / "stream.md", markdown(report, header(report), image="stream.png"))
        plot(report, path.parent / "stream.png")
    if len(reports) > 1:
        write_text_atomic(out / "stream.md", spread_markdown(reports))
    return reports


def serve_one(pair, spec, factories: dict, args: argparse.Namespace, out: Path) -> dict:
    """Serve the stream of one seed with every setup; write its JSON, page and plot to ``out``."""
    requests = draw_requests(spec, pair.prompts)[: args.requests]
    setups = [Setup("plain", StaticController(0), LiveDraft(pair.draft))]
    setups += build_setups(pair, spec, factories)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    scalars = StreamScalars(Path(args.runs) / f"stream__{spec.name}__{spec.split}__seed{spec.seed}__{stamp}")
    started = time.perf_counter()
    serve_stream(
        pair, spec, setups, requests, scalars.request, scalars.adaptation, progress=not args.no_progress
    )
    scalars.close()
    reference = setups[0].outputs
    report = summarize(setups, spec)
    report.update(
        stream=spec.to_dict() | {"requests_served": len(requests)},
        outputs_identical_to_plain={s.name: s.outputs == reference for s in setups}
        if spec.sampling.greedy
        else None,
        wall_seconds=time.perf_counter() - started,
        pair=pair_info(pair),
        machine=machine_info(pair),
        date=datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        command=command_line(),
        torch_threads=torch.get_num_threads(),
    )
    write_text_atomic(out / "stream.json", json.dumps(report, indent=1, default=str) + "\n")
    page = markdown(report, header(report), image="stream.png")
    write_text_atomic(out / "stream.md", page)
    plot(report, out / "stream.png")
    print(page)
    return report


def spread_markdown(reports: list[dict]) -> str:
    """The seeds side by side: tokens/s (adaptation included) against plain and against the frozen
    draft, and math acceptance frozen -> adapted after the first swap, per seed, with the median."""
    first = reports[0]
    setups = list(first["setups"])
    seeds = [r["stream"]["seed"] for r in reports]
    rows = []
    for name in setups:
        frozen = name.replace("adapted", "frozen", 1) if name.startswith("adapted") else None
        vs_plain = [r["setups"][name]["tokens_per_s"] / r["setups"]["plain"]["tokens_per_s"] for r in reports]
        cells = [name, *(f"{v:.3f}x" for v in vs_plain), f"{statistics.median(vs_plain):.3f}x"]
        if frozen:
            vs_frozen = [
                r["setups"][name]["tokens_per_s"] / r["setups"][frozen]["tokens_per_s"] for r in reports
            ]
            cells += [*(f"{v:.3f}x" for v in vs_frozen), f"{statistics.median(vs_frozen):.3f}x"]
        else:
            cells += ["-"] * (len(seeds) + 1)
        rows.append(cells)
    header_cells = ["setup", *(f"vs plain, seed {s}" for s in seeds), "median"]
    header_cells += [*(f"vs frozen, seed {s}" for s in seeds), "median"]
    math_rows = []
    for row in first["domains"]:
        cells = [row["controller"], row["domain"]]
        for r in reports:
            match = next(
                d
                for d in r["domains"]
                if d["controller"] == row["controller"] and d["domain"] == row["domain"]
            )
            before, after = match["frozen_after"], match["adapted_after"]
            cells.append("-" if before is None or after is None else f"{before:.3f} -> {after:.3f}")
        math_rows.append(cells)
    machine = first["machine"]
    return "\n".join(
        [
            f"# Request stream `{first['stream']['name']}` ({first['stream']['split']} split), "
            f"seeds {', '.join(map(str, seeds))}: frozen vs adapted draft",
            "",
            "Each seed draws its own request order and held-back requests from the same prompts; every page",
            "below holds one seed in full (tables, plot, adaptations). Tokens/s include adaptation time.",
            "",
            markdown_table(header_cells, rows),
            "",
            "Acceptance (accepted / proposed) on the requests after the adapted draft's first swap, "
            "frozen -> adapted:",
            "",
            markdown_table(["controller", "domain", *(f"seed {s}" for s in seeds)], math_rows),
            "",
            "Pages: " + ", ".join(f"[seed {s}](seed{s}/stream.md)" for s in seeds) + ".",
            "",
            f"Command: `{first['command']}`",
            "",
            f"Machine: {describe_machine(machine)}; {describe_commit(machine) or 'commit unknown'}"
            + f"; {reports[-1]['date']}; {sum(r['wall_seconds'] for r in reports) / 60:.1f} min.",
            "",
        ]
    )


def header(report: dict) -> str:
    stream, machine = report["stream"], report["machine"]
    adaptation = stream["adaptation"]
    segments = ", ".join(
        f"{s['name']} ({', '.join(f'{d} {n}' for d, n in s['requests'].items())})" for s in stream["segments"]
    )
    identical = report["outputs_identical_to_plain"]
    return "\n".join(
        [
            f"# Request stream `{stream['name']}` ({stream['split']} split): frozen vs adapted draft",
            "",
            f"{stream['description']} {report['stream']['requests_served']} requests, one at a time: "
            f"{segments}; {stream['max_new_tokens']} new tokens each, temperature "
            f"{stream['sampling']['temperature']}, seed {stream['seed']}. Pair {report['pair']['name']}.",
            "",
            f"Every {adaptation['every']} requests, when the live draft's acceptance on them is below "
            f"{adaptation['adapt_below']}, an adaptation runs in between requests (serving pauses; its time "
            f"counts): at most {adaptation['steps']} AdamW steps (batch {adaptation['batch_size']}, lr "
            f"{adaptation['lr']}) of KD (T = {adaptation['temperature']}, alpha = {adaptation['alpha']}) "
            f"plus LM loss on the generated tokens of the last {adaptation['window']} requests (the target's "
            f"logits kept from its verify forwards), {adaptation['holdout']:.0%} of requests held back to "
            "judge the candidate.",
            "",
            "Greedy outputs identical to plain decoding in every setup: "
            + (
                "not checked (sampling)"
                if identical is None
                else "yes"
                if all(identical.values())
                else f"NO {identical}"
            )
            + ".",
            "",
            f"Command: `{report['command']}`",
            "",
            f"Machine: {describe_machine(machine)}; {describe_commit(machine) or 'commit unknown'}"
            + f"; {report['date']}; {report['wall_seconds'] / 60:.1f} min.",
        ]
    )


if __name__ == "__main__":
    main()
