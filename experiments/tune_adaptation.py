"""Choose the adaptation's learning rate and step budget on the validation stream, without decoding it
once per setting.

The stream's requests are decoded once by the target alone, keeping its logits (greedy outputs do
not depend on the draft, so this is the traffic every setup sees). Then, for every (lr, steps,
replay, adapt_below) of the grid, the adaptation schedule of the stream file is replayed on that
traffic: after every ``adaptation.every`` requests, :class:`specrl.serving.DraftAdapter` trains a
candidate on the window, judges it on the held-back requests and swaps it in or not; every request
is scored with the draft that is live when it arrives (nothing has trained on it yet): the acceptance
it would see. A row gives that acceptance per domain, token-weighted over the whole stream, the
swaps, and the adaptations' seconds.

Run from the repository root (offline, embedded pair; about 5 minutes on 2 CPU cores):

    python experiments/tune_adaptation.py                          # validation split of code_math_prose
    python experiments/tune_adaptation.py --lr 1e-4,3e-4 --steps 8 --every 8 --adapt-below 0.6

Writes ``OUT/tuning.json`` and ``OUT/tuning.md`` (default ``results/stream_validation``).
"""

from __future__ import annotations

import argparse
import datetime
import json
from dataclasses import replace
from pathlib import Path

import torch
from tqdm.auto import tqdm

from specrl.controllers import StaticController
from specrl.engine.decoder import SpeculativeDecoder
from specrl.evaluation.machine import command_line, describe_commit, describe_machine, machine_info
from specrl.io import write_text_atomic
from specrl.serving import DraftAdapter, LiveDraft, Traffic, TrafficBuffer, draw_requests, load_stream
from specrl.serving.adaptation import teacher_log_probs
from specrl.tables import markdown_table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stream", default="code_math_prose")
    parser.add_argument("--split", default="validation", help="never test: settings are chosen here")
    parser.add_argument("--preset", default=None, help="override the stream's embedded pair preset")
    parser.add_argument("--lr", default="3e-4,1e-3", help="comma-separated learning rates")
    parser.add_argument("--steps", default="8,16", help="comma-separated step budgets")
    parser.add_argument("--replay", default="0", help="comma-separated replay sizes (older requests kept)")
    parser.add_argument("--adapt-below", default="1.0,0.6,0.5", help="comma-separated adapt_below thresholds")
    parser.add_argument("--every", default="8,16", help="comma-separated adaptation periods")
    parser.add_argument("--out", default="results/stream_validation")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.split == "test":
        raise SystemExit("tune on the validation (or train) split; the test split is for the reported run")
    spec = load_stream(args.stream).with_split(args.split)
    if args.preset is not None:
        spec = replace(spec, pair=replace(spec.pair, preset=args.preset))
    pair = spec.pair.load()
    requests = draw_requests(spec, pair.prompts)

    decoder = SpeculativeDecoder(pair, StaticController(0))
    traffic = []
    for request in tqdm(requests, desc="traffic (plain decoding)", unit="request"):
        out = decoder.generate(
            request.prompt, spec.max_new_tokens, temperature=0.0, seed=request.seed, keep_target_logits=True
        )
        ids = [*out.prompt_ids, *out.token_ids]
        traffic.append(Traffic(request, ids, len(out.prompt_ids), teacher_log_probs(out.target_logits)))

    periods = [int(e) for e in args.every.split(",")] if args.every else [spec.adaptation.every]
    settings = [(None, 0, 0, 1.0, periods[0])] + [
        (float(lr), int(steps), int(replay), float(below), every)
        for every in periods
        for below in args.adapt_below.split(",")
        for replay in args.replay.split(",")
        for lr in args.lr.split(",")
        for steps in args.steps.split(",")
    ]
    DraftAdapter(pair, spec.adaptation, spec.sampling).warm_up(pair.draft)
    rows = []
    for lr, steps, replay, below, every in tqdm(settings, desc="settings", unit="setting"):
        adaptation = spec.adaptation
        if lr is not None:
            adaptation = replace(
                adaptation, lr=lr, steps=steps, replay=replay, adapt_below=below, every=every
            )
        points = list(range(every - 1, len(traffic) - 1, every))
        adapter = DraftAdapter(pair, adaptation, spec.sampling, seed=spec.seed)
        live = LiveDraft(pair.draft)
        buffer = TrafficBuffer(adaptation.window, adaptation.replay, seed=spec.seed)
        seconds, swaps, served = 0.0, 0, {}
        for i, entry in enumerate(traffic):
            score = adapter.acceptance(live.model, [entry])[0]  # with the draft live when it is served
            tokens = len(entry.token_ids) - entry.prompt_length
            total = served.setdefault(entry.request.domain, [0.0, 0])
            served[entry.request.domain] = [total[0] + score * tokens, total[1] + tokens]
            buffer.push(entry)
            if lr is not None and i in points:
                result = adapter.adapt(live, buffer, after_request=i)
                seconds, swaps = seconds + result.seconds, swaps + result.swapped
        rows.append(
            {
                "setting": "frozen"
                if lr is None
                else f"every {every}, lr {lr:g}, {steps} steps, replay {replay}, adapt below {below:g}",
                "every": every,
                "lr": lr,
                "steps": steps,
                "replay": replay,
                "adapt_below": below,
                "swaps": swaps,
                "adaptations": 0 if lr is None else len(points),
                "seconds": seconds,
                "by_domain": {d: a / n for d, (a, n) in sorted(served.items())},
                "overall": sum(a for a, _ in served.values()) / sum(n for _, n in served.values()),
            }
        )
    report = {
        "stream": spec.to_dict(),
        "rows": rows,
        "command": command_line(),
        "machine": machine_info(pair),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    out = Path(args.out)
    write_text_atomic(out / "tuning.json", json.dumps(report, indent=1, default=str) + "\n")
    page = markdown(report)
    write_text_atomic(out / "tuning.md", page)
    print(page)
    return report


def markdown(report: dict) -> str:
    rows, stream = report["rows"], report["stream"]
    domains = sorted({d for r in rows for d in r["by_domain"]})
    table = [
        [r["setting"], *(f"{r['by_domain'][d]:.3f}" for d in domains), f"{r['overall']:.3f}"]
        + [f"{r['swaps']}/{r['adaptations']}", f"{r['seconds']:.1f}"]
        for r in rows
    ]
    header = ["setting", *(f"{d} acceptance" for d in domains), "all", "swaps", "adaptation s"]
    return "\n".join(
        [
            f"# Adaptation settings on the `{stream['name']}` stream, {stream['split']} split",
            "",
            "Acceptance (greedy agreement with the target of the draft live when the request arrives) on "
            "every request's generated tokens, token-weighted over the stream; seconds: the adaptations' "
            "wall time (the teacher comes from the verify forwards).",
            "",
            markdown_table(header, table),
            "",
            f"Command: `{report['command']}`",
            "",
            f"Machine: {describe_machine(report['machine'])}; "
            f"{describe_commit(report['machine']) or 'commit unknown'}; {report['date']}.",
            "",
        ]
    )


if __name__ == "__main__":
    torch.set_grad_enabled(True)
    main()
