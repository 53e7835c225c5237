"""The latency file: its format name and version, its keys, their checks, reading and writing JSON.

A file holds the tables of both sampling modes (``LATENCY_FORMAT_VERSION`` 2; version 1 files,
from isolated profiling before the loop model, are refused with a message, and
:func:`~specrl.latency.calibrated` measures again)::

    {"format": "specrl-latency", "version": 2, "kind": "loop" | "profiled" | "constant",
     "pair": ..., "device": ..., "dtype": ..., "batch_size": 1,
     "contexts": [c_1 < ... < c_C], "new_tokens": [1, ..., n_max],
     "greedy": {"target_seconds": [[n = 1 at each context], ..., [n = n_max ...]],   # (n_max, C)
                "draft_first_seconds": [at each context],                             # (C,)
                "draft_next_seconds": [at each context]},                             # (C,)
     "sampled": {... the same keys ...},
     "fit_error": null | {...},                                 # see learn() and profile()
     "measurement": {...}}                                      # how it was made

``batch_size`` is 1: only batch 1 is measured for now; the key is there so that a later
version can add a batch dimension without breaking the format.

This module knows the format, not the model: :meth:`LatencyModel.to_dict
<specrl.latency.LatencyModel.to_dict>`, ``from_dict``, ``save`` and ``load`` build on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specrl.io import write_text_atomic

LATENCY_FORMAT = "specrl-latency"
LATENCY_FORMAT_VERSION = 2
MODES = ("greedy", "sampled")
KINDS = ("loop", "profiled", "constant")
COST_KEYS = ("target_seconds", "draft_first_seconds", "draft_next_seconds")
RECALIBRATE = (
    "re-run `python experiments/calibrate.py` (or delete the file: it is measured again on next use)"
)
_REQUIRED = ("kind", "pair", "device", "dtype", "batch_size", "contexts", "new_tokens", *MODES)


class LatencyError(ValueError):
    """A latency file or table is invalid, corrupt or from another version; says which and the fix."""


def invalid(source: str, error: Exception) -> LatencyError:
    """The error for a file whose content fails a check: names ``source`` and the fix."""
    return LatencyError(f"{source}: {error}; {RECALIBRATE}")


def check(data: Any, source: str) -> None:
    """Check a file's content up to the tables (their shapes and values: the model's own checks).

    Raises:
        LatencyError: naming ``source``, the problem and the fix.
    """
    if not isinstance(data, Mapping) or data.get("format") != LATENCY_FORMAT:
        raise LatencyError(
            f'{source}: not a specrl latency file (no "format": "{LATENCY_FORMAT}"); {RECALIBRATE}'
        )
    version = data.get("version")
    if version != LATENCY_FORMAT_VERSION:
        old = " (an isolated profile, from before the loop-learned model)" if version == 1 else ""
        raise LatencyError(
            f"{source}: latency format version {version!r}{old}, but this specrl reads version "
            f"{LATENCY_FORMAT_VERSION}; {RECALIBRATE}"
        )
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise LatencyError(f"{source}: missing key(s) {missing}; the file is incomplete: {RECALIBRATE}")
    for mode in MODES:
        if not isinstance(data[mode], Mapping) or any(key not in data[mode] for key in COST_KEYS):
            raise invalid(source, LatencyError(f"'{mode}' must hold {list(COST_KEYS)}"))
    target = data["greedy"]["target_seconds"]
    n_rows = len(target) if isinstance(target, list) else -1
    if data["new_tokens"] != list(range(1, n_rows + 1)):
        raise invalid(
            source,
            LatencyError(
                f"'new_tokens' must be [1, ..., n_max] with one 'target_seconds' row each, got "
                f"{data['new_tokens']!r} and {n_rows} rows"
            ),
        )


def read(path: str | Path) -> Any:
    """The parsed JSON of a latency file (unchecked); :class:`LatencyError` if missing or not JSON."""
    path = Path(path)
    if not path.is_file():
        raise LatencyError(
            f"latency file '{path}' does not exist; write one with "
            "`python experiments/calibrate.py --out PATH`"
        )
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise LatencyError(f"{path}: not valid JSON ({error}); {RECALIBRATE}") from None


def write(path: str | Path, data: Mapping[str, Any]) -> None:
    """Write a file's content as JSON, atomically (readers see the old file or the new one)."""
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
