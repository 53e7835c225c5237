"""Acceptance traces: what the trace-replay simulator replays (one concern per module).

- :mod:`specrl.traces.format`: ``Segment``, ``Trace``, ``TraceSet``; the ``.npz`` file, its
  schema and ``TraceError`` (numpy only).
- :mod:`specrl.traces.analysis`: the teacher-forced statistics of a decoded segment (engine).
- :mod:`specrl.traces.store`: file names and folders of a scenario's traces, and load-or-collect
  with the collector passed in.

Recording runs the real-loop env, so it lives with the envs, in :mod:`specrl.envs.recording`
(``record_episode``, ``collect_traces``, ``cached_traces``). Dependencies point one way:
``engine <- traces <- envs``: import those three from :mod:`specrl.envs`.
"""

from specrl.traces.analysis import analyse_segment, extend_past_eos
from specrl.traces.format import TRACE_FORMAT_VERSION, Segment, Trace, TraceError, TraceSet
from specrl.traces.store import (
    DEFAULT_PROMPTS_PER_DOMAIN,
    cache_key,
    cache_parts,
    load_or_collect,
    pool_names,
    trace_dirs,
    with_scenario,
)

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
    "extend_past_eos",
    "load_or_collect",
    "pool_names",
    "trace_dirs",
    "with_scenario",
]
