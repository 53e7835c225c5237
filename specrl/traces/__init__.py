"""Acceptance traces: what the trace-replay simulator replays (one concern per module).

- :mod:`specrl.traces.format`: ``Segment``, ``Trace``, ``TraceSet``; the ``.npz`` file, its
  schema and ``TraceError`` (numpy only).
- :mod:`specrl.traces.analysis`: the teacher-forced statistics of a decoded segment (engine).
- :mod:`specrl.traces.cache`: file names and folders of a scenario's traces, and load-or-collect
  with the collector passed in.

Recording runs the real-loop env, so it lives with the envs, in :mod:`specrl.envs.recording`
(``record_episode``, ``collect_traces``, ``cached_traces``). Dependencies point one way:
``engine <- traces <- envs``. The three names are still importable from here for existing code,
resolved on first use so that importing this package never imports an env; code in or below
``specrl.envs`` imports them from :mod:`specrl.envs.recording`.
"""

from typing import Any

from specrl.traces.analysis import analyse_segment, extend_past_eos
from specrl.traces.cache import (
    DEFAULT_PROMPTS_PER_DOMAIN,
    cache_key,
    cache_parts,
    load_or_collect,
    trace_dirs,
    with_scenario,
)
from specrl.traces.format import TRACE_FORMAT_VERSION, Segment, Trace, TraceError, TraceSet

_RECORDING = ("cached_traces", "collect_traces", "record_episode")

__all__ = [
    "DEFAULT_PROMPTS_PER_DOMAIN",
    "TRACE_FORMAT_VERSION",
    "Segment",
    "Trace",
    "TraceError",
    "TraceSet",
    "analyse_segment",
    "cache_key",
    "cache_parts",
    "cached_traces",
    "collect_traces",
    "extend_past_eos",
    "load_or_collect",
    "record_episode",
    "trace_dirs",
    "with_scenario",
]


def __getattr__(name: str) -> Any:
    if name in _RECORDING:
        from specrl.envs import recording

        return getattr(recording, name)
    raise AttributeError(f"module 'specrl.traces' has no attribute {name!r}")
