"""``experiments/serve_stream.py``'s runs: a request stream whose domain shifts, served by plain
decoding and by every setup (the draft frozen or adapted online, under each controller), one
seed at a time (:func:`specrl.serving.serve_stream`), into one report per seed."""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from specrl.controllers import Controller, StaticController
from specrl.evaluation.machine import command_line, machine_info, pair_info
from specrl.models import ModelPair
from specrl.serving import Setup, StreamSpec, build_setups, draw_requests, serve_stream
from specrl.serving.adaptation import LiveDraft
from specrl.serving.stream_report import StreamScalars, summarize


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
        The report: the summary (:func:`specrl.serving.stream_report.summarize`), the stream, whether
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
