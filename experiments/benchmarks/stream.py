"""``experiments/serve_stream.py``'s runs: a request stream whose domain shifts, served by plain
decoding and by every setup (the draft frozen or adapted online, under each controller), one
seed at a time (:func:`specrl.serving.serve_stream`), into one report per seed: its summary per
setup, acceptance per domain, adaptations, and TensorBoard scalars under ``specdec/stream/``."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter

from specrl.controllers import Controller, StaticController
from specrl.evaluation.machine import machine_info, pair_info
from specrl.evaluation.records import acceptance_rate
from specrl.models import ModelPair
from specrl.provenance import command_line
from specrl.serving import Setup, StreamSpec, build_setups, draw_requests, serve_stream
from specrl.serving.adaptation import LiveDraft

#: The TensorBoard scalars of a served stream (x axis: the request index), per setup.
SCALARS = {
    "specdec/stream/tokens_per_s": "the request's new tokens / its wall time",
    "specdec/stream/acceptance_rate": "the request's accepted / proposed draft tokens",
    "specdec/stream/cumulative_tokens_per_s": "tokens so far / (decoding + adaptation time so far)",
    "specdec/stream/draft_version": "the live draft's version (0: the original)",
    "specdec/stream/adaptation_seconds": "an adaptation's wall time (at the request it followed)",
    "specdec/stream/holdout_acceptance_live": "held-back acceptance of the live draft, at an adaptation",
    "specdec/stream/holdout_acceptance_candidate": "held-back acceptance of the candidate",
    "specdec/stream/swapped": "1 when the candidate went live",
}


def summarize(setups: list[Setup], spec: StreamSpec) -> dict[str, Any]:
    """Totals per setup and segment, acceptance per domain (frozen vs adapted on the same requests),
    and every adaptation; plain data, for the JSON file and the tables."""
    segments = [segment.name for segment in spec.segments]
    rows = {}
    for setup in setups:
        adaptation_seconds = sum(a.seconds for a in setup.adaptations)
        rows[setup.name] = {
            **_totals(setup.records, adaptation_seconds),
            "adaptations": len(setup.adaptations),
            "swaps": sum(a.swapped for a in setup.adaptations),
            "segments": {
                name: _totals(
                    [r for r in setup.records if r["segment"] == name],
                    sum(
                        a.seconds
                        for a in setup.adaptations
                        if setup.records[a.after_request]["segment"] == name
                    ),
                )
                for name in segments
            },
        }
    return {
        "setups": rows,
        "domains": _domain_acceptance(setups),
        "adaptations": {s.name: [a.to_dict() for a in s.adaptations] for s in setups if s.adapts},
        "records": {s.name: s.records for s in setups},
    }


def _totals(records: list[dict], adaptation_seconds: float) -> dict[str, float]:
    tokens = sum(r["tokens"] for r in records)
    decode = sum(r["seconds"] for r in records)
    return {
        "requests": len(records),
        "tokens": tokens,
        "decode_seconds": decode,
        "adaptation_seconds": adaptation_seconds,
        "tokens_per_s": tokens / (decode + adaptation_seconds) if records else 0.0,
        "decode_tokens_per_s": tokens / decode if decode else 0.0,
        "acceptance_rate": acceptance_rate(records),
    }


def _domain_acceptance(setups: list[Setup]) -> list[dict[str, Any]]:
    """Per controller and domain: accepted / proposed of the frozen and the adapted setup, over the
    requests served before the adapted draft's first swap and over those after it (the same
    requests for both setups)."""
    rows = []
    by_name = {s.name: s for s in setups}
    for adapted in (s for s in setups if s.adapts):
        frozen = by_name.get(adapted.name.replace("adapted", "frozen", 1))
        if frozen is None:
            continue
        first_swap = next(
            (r["request"] for r in adapted.records if r["draft_version"] > 0), len(adapted.records)
        )
        for domain in sorted({r["domain"] for r in adapted.records}):
            row: dict[str, Any] = {"controller": adapted.name.split(" + ", 1)[1], "domain": domain}
            for when, span in (
                ("before", range(first_swap)),
                ("after", range(first_swap, len(adapted.records))),
            ):
                for label, setup in (("frozen", frozen), ("adapted", adapted)):
                    chosen = [setup.records[i] for i in span if setup.records[i]["domain"] == domain]
                    row[f"{label}_{when}"] = _acceptance(chosen)
                row[f"requests_{when}"] = len(chosen)
            rows.append(row)
    return rows


def _acceptance(records: list[dict]) -> float | None:
    return acceptance_rate(records) if any(r["proposed"] for r in records) else None


def serve_seed(
    pair: ModelPair,
    spec: StreamSpec,
    factories: Mapping[str, Callable[[], Controller]],
    requests: int | None = None,
    runs: Path = Path("runs"),
    progress: bool = True,
) -> dict[str, Any]:
    """Serve the stream of ``spec`` (its seed) with plain decoding and every setup of
    ``factories``' controllers; TensorBoard scalars under ``runs/stream__<stream>__<split>__seed<N>__<time>``.

    Args:
        requests: serve only the first this many requests (None: all).

    Returns:
        The report: the summary (:func:`summarize`), the stream, whether
        every setup's greedy outputs equal plain decoding's (None when sampling), the wall seconds,
        the pair, the machine, the date, the command and torch's thread count.
    """
    drawn = draw_requests(spec, pair.prompts)[:requests]
    setups = [Setup("plain", StaticController(0), LiveDraft(pair.draft))]
    setups += build_setups(pair, spec, factories)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    scalars = StreamScalars(Path(runs) / f"stream__{spec.name}__{spec.split}__seed{spec.seed}__{stamp}")
    started = time.perf_counter()
    serve_stream(pair, spec, setups, drawn, scalars.request, scalars.adaptation, progress=progress)
    scalars.close()
    reference = setups[0].outputs
    report = summarize(setups, spec)
    report.update(
        stream=spec.to_dict() | {"requests_served": len(drawn)},
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
    return report


def seeds_with_different_outputs(reports: list[dict[str, Any]]) -> list[int]:
    """The seeds of the greedy reports where some setup's outputs differ from plain decoding's."""
    return [
        report["stream"]["seed"]
        for report in reports
        if report["outputs_identical_to_plain"] and not all(report["outputs_identical_to_plain"].values())
    ]


class StreamScalars:
    """Writes :data:`SCALARS` for every setup to ``folder/<setup>`` (one TensorBoard run each)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.writers: dict[str, SummaryWriter] = {}

    def writer(self, setup: Setup) -> SummaryWriter:
        if setup.name not in self.writers:
            slug = setup.name.replace(" + ", "__").replace(" ", "_")
            self.writers[setup.name] = SummaryWriter(str(self.folder / slug))
        return self.writers[setup.name]

    def request(self, setup: Setup, record: dict) -> None:
        """Called after ``record`` joined ``setup.records``: the setup's logs hold everything so far."""
        w, step = self.writer(setup), record["request"]
        so_far = _totals(setup.records, sum(a.seconds for a in setup.adaptations))
        w.add_scalar("specdec/stream/tokens_per_s", record["tokens_per_s"], step)
        w.add_scalar("specdec/stream/acceptance_rate", record["acceptance_rate"], step)
        w.add_scalar("specdec/stream/cumulative_tokens_per_s", so_far["tokens_per_s"], step)
        w.add_scalar("specdec/stream/draft_version", record["draft_version"], step)

    def adaptation(self, setup: Setup, result) -> None:
        w, step = self.writer(setup), result.after_request
        w.add_scalar("specdec/stream/adaptation_seconds", result.seconds, step)
        if result.live_score is not None:
            w.add_scalar("specdec/stream/holdout_acceptance_live", result.live_score, step)
        if result.candidate_score is not None:
            w.add_scalar("specdec/stream/holdout_acceptance_candidate", result.candidate_score, step)
        w.add_scalar("specdec/stream/swapped", float(result.swapped), step)

    def close(self) -> None:
        for w in self.writers.values():
            w.close()
