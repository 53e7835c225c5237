"""Serving a request stream whose domain mix shifts, with online adaptation of the draft.

``stream_file`` (a stream's spec: its segments and adaptation) -> ``requests`` (the arrivals) ->
``side_by_side`` (setups served side by side, the comparison harness of a stream) with
``adaptation`` (re-distil, judge on held-back traffic, swap). ``experiments/serve_stream.py`` runs
it and writes the page (its tables, plot and TensorBoard scalars live beside it, in
``experiments/benchmarks/``).

``continuous`` serves requests that arrive over time with continuous batching in the real loop
(``experiments/batch_real.py``), the counterpart of the batch simulator.
"""

from specrl.serving.adaptation import AdaptationResult, DraftAdapter, LiveDraft, Traffic, TrafficBuffer
from specrl.serving.continuous import ContinuousRun, TimedRequest, scenario_requests, serve_continuous
from specrl.serving.requests import Request, draw_requests
from specrl.serving.side_by_side import Setup, build_setups, serve_request, serve_stream
from specrl.serving.stream_file import (
    AdaptationSpec,
    Segment,
    StreamError,
    StreamSpec,
    load_stream,
    shipped_streams,
)

__all__ = [
    "AdaptationResult",
    "AdaptationSpec",
    "ContinuousRun",
    "DraftAdapter",
    "LiveDraft",
    "Request",
    "Segment",
    "Setup",
    "TimedRequest",
    "StreamError",
    "StreamSpec",
    "Traffic",
    "TrafficBuffer",
    "build_setups",
    "draw_requests",
    "load_stream",
    "scenario_requests",
    "serve_continuous",
    "serve_request",
    "serve_stream",
    "shipped_streams",
]
