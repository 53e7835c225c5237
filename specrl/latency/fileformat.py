"""The latency file: its format name and version, its keys, their checks, reading and writing JSON.

A file holds the tables of both sampling modes on a grid of batch sizes and contexts
(``LATENCY_FORMAT_VERSION`` 3)::

    {"format": "specrl-latency", "version": 3, "kind": "loop" | "profiled" | "batch" | "serving" | "constant",
     "pair": ..., "device": ..., "dtype": ...,
     "batch_sizes": [b_1 < ... < b_B], "contexts": [c_1 < ... < c_C], "new_tokens": [1, ..., n_max],
     "greedy": {"target_seconds": [per batch size: [n = 1 at each context], ...],  # (B, n_max, C)
                "draft_first_seconds": [per batch size: [at each context]],       # (B, C)
                "draft_next_seconds": [per batch size: [at each context]]},       # (B, C)
     "sampled": {... the same keys ...},
     "draft_scale": null | [per batch size],                  # (B,)
     "verify_scale": null | [per batch size: [per n]],        # (B, n_max)
     "prefill": [c0, c1, c2, c3],
     "drafter_costs": {...},
     "fit_error": null | {...},                                 # see learn() and profile()
     "measurement": {...}}                                      # how it was made

A file of another version is refused with the fix; :func:`~specrl.latency.calibrated` then
measures again. ``LatencyModel.to_dict``, ``from_dict``, ``save`` and ``load`` build on this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from specrl.io import write_text_atomic

LATENCY_FORMAT = "specrl-latency"
LATENCY_FORMAT_VERSION = 3
MODES = ("greedy", "sampled")
KINDS = ("loop", "profiled", "batch", "constant", "synthetic", "serving")
COST_KEYS = ("target_seconds", "draft_first_seconds", "draft_next_seconds")
RECALIBRATE = "re-run `specrl calibrate` (or delete the file: it is measured again on next use)"
_REQUIRED = ("kind", "pair", "device", "dtype", "batch_sizes", "contexts", "new_tokens", *MODES)


class LatencyError(ValueError):
    """A latency file or table is invalid, corrupt or from another version; says which and the fix."""


def invalid(source: str, error: Exception) -> LatencyError:
    """The error for a file whose content fails a check: names ``source`` and the fix."""
    return LatencyError(f"{source}: {error}; {RECALIBRATE}")


def check(data: Any, source: str) -> dict[str, Any]:
    """Check a file's content up to the tables (their shapes and values: the model's own checks);
    return it with the optional keys filled in.

    Raises:
        LatencyError: naming ``source``, the problem and the fix.
    """
    if not isinstance(data, Mapping) or data.get("format") != LATENCY_FORMAT:
        raise LatencyError(
            f'{source}: not a specrl latency file (no "format": "{LATENCY_FORMAT}"); {RECALIBRATE}'
        )
    version = data.get("version")
    if version != LATENCY_FORMAT_VERSION:
        raise LatencyError(
            f"{source}: latency format version {version!r}, but this specrl reads version "
            f"{LATENCY_FORMAT_VERSION}; {RECALIBRATE}"
        )
    missing = [key for key in _REQUIRED if key not in data]
    if missing:
        raise LatencyError(f"{source}: missing key(s) {missing}; the file is incomplete: {RECALIBRATE}")
    for mode in MODES:
        if not isinstance(data[mode], Mapping) or any(key not in data[mode] for key in COST_KEYS):
            raise invalid(source, LatencyError(f"'{mode}' must hold {list(COST_KEYS)}"))
    target = data["greedy"]["target_seconds"]
    first = target[0] if isinstance(target, list) and target else None
    n_rows = len(first) if isinstance(first, list) else -1
    if data["new_tokens"] != list(range(1, n_rows + 1)):
        raise invalid(
            source,
            LatencyError(
                f"'new_tokens' must be [1, ..., n_max] with one 'target_seconds' row each, got "
                f"{data['new_tokens']!r} and {n_rows} rows"
            ),
        )
    return {"draft_scale": None, "verify_scale": None, "prefill": [0.0] * 4, **data}


def read(path: str | Path) -> Any:
    """The parsed JSON of a latency file (unchecked); :class:`LatencyError` if missing or not JSON."""
    path = Path(path)
    if not path.is_file():
        raise LatencyError(
            f"latency file '{path}' does not exist; write one with `specrl calibrate --out PATH`"
        )
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise LatencyError(f"{path}: not valid JSON ({error}); {RECALIBRATE}") from None


def write(path: str | Path, data: Mapping[str, Any]) -> None:
    """Write a file's content as JSON, atomically (readers see the old file or the new one)."""
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")
