"""Serving a request stream whose domain mix shifts, with online adaptation of the draft.

``spec`` (stream files) -> ``requests`` (the arrivals) -> ``server`` (setups served side by side)
with ``adaptation`` (re-distil, judge on held-back traffic, swap) -> ``report`` (tables, plot,
TensorBoard). The command line is ``experiments/serve_stream.py``.

``continuous`` serves requests that arrive over time with continuous batching in the real loop
(``experiments/batch_real.py``), the counterpart of the batch simulator.
"""

from specrl.serving.adaptation import AdaptationResult, DraftAdapter, LiveDraft, Traffic, TrafficBuffer
from specrl.serving.continuous import ContinuousRun, TimedRequest, scenario_requests, serve_continuous
from specrl.serving.requests import Request, draw_requests
from specrl.serving.server import Setup, build_setups, serve_request, serve_stream
from specrl.serving.spec import AdaptationSpec, Segment, StreamError, StreamSpec, load_stream, shipped_streams

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
