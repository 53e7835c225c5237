"""Where the engine meets requests (docs/design.md section 8).

A request stream whose domain mix shifts, served with online draft adaptation: ``stream_file`` (a
stream's spec and its requests), ``side_by_side`` (setups served side by side) and ``adaptation``
(re-distil, judge on held-back traffic, swap); ``experiments/serve_stream.py`` runs it.
``continuous``: requests that arrive over time, served with continuous batching in the real loop.
"""

from specrl.serving.adaptation import AdaptationResult, DraftAdapter, LiveDraft, Traffic, TrafficBuffer
from specrl.serving.continuous import ContinuousRun, TimedRequest, scenario_requests, serve_continuous
from specrl.serving.side_by_side import Setup, build_setups, serve_request, serve_stream
from specrl.serving.stream_file import (
    AdaptationSpec,
    Request,
    Segment,
    StreamError,
    StreamSpec,
    draw_requests,
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
