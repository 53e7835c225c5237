"""Acceptance traces: what the trace-replay simulator replays.

- :mod:`specrl.traces.format`: ``Segment``, ``Trace``, ``TraceSet``; the ``.npz`` file, its
  schema and ``TraceError`` (numpy only).
- :mod:`specrl.traces.analysis`: the teacher-forced statistics of a decoded segment (engine).

Recording runs the real-loop env and a scenario's trace files are named by the scenario, so both
live with the envs: :mod:`specrl.envs.recording` (``record_episode``, ``collect_traces``,
``cached_traces``) and :mod:`specrl.envs.trace_store`.
"""

from specrl.traces.analysis import analyse_segment, extend_past_eos
from specrl.traces.format import TRACE_FORMAT_VERSION, Segment, Trace, TraceError, TraceSet

__all__ = [
    "TRACE_FORMAT_VERSION",
    "Segment",
    "Trace",
    "TraceError",
    "TraceSet",
    "analyse_segment",
    "extend_past_eos",
]
