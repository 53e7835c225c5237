"""vLLM's prices: the serving engine's latency model, fitted from the steps it recorded.

The proposer inside vLLM (:mod:`specrl.vllm`) records one :class:`ServedStep` per engine step, as
it sees it between two of its calls (a JSON-lines file: :func:`write_served_steps`,
:func:`read_served_steps`). :func:`fit_serving_latency` fits, every coefficient >= 0::

    verify   = a + b rows + c verified + d context       on the steps without prefill
    prefill  = e [the step prefilled] + f prefill_tokens  on the rest, over the verify's residual
    draft    = first(draft_rows) + (draft_forwards - 1) next(draft_rows), each g + h draft_rows
    overhead = o0 + o1 rows                               propose_seconds - draft_seconds

vLLM packs the rows' tokens without padding, so the verify reads the tokens verified in total and
the sum of the rows' contexts, not the longest feed and the grid's width. The overhead is the
proposer's own work every call (features, controller, the n-gram lookup), paid whatever the action.
Each part is non-negative least squares of relative errors (:func:`_relative_nnls`), refitted
once without the steps it misses by more than median + 8 MADs (a pause, or the draft admitting a
request's prompt, must not move a price).

The law is tabulated as a :class:`~specrl.latency.LatencyModel` of kind "serving" (linear in the
batch size, the tokens a row and the context, so the tables' interpolation is exact on their grid):
target = verify + overhead, the draft tables from g, h, prefill = (e, f, 0, 0), the lookup free
beside the overhead. Priced with ``verified`` and the rows' mean context
(:meth:`LatencyModel.step_seconds`, :attr:`LatencyModel.packed`), a batch replay env prices as vLLM
runs. The held-out error refits without every fifth step and compares those steps.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import numbers
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from specrl.features import LOOKUP_DRAFTER
from specrl.io import json_lines, write_text_atomic
from specrl.latency.fileformat import LatencyError
from specrl.latency.model import LatencyModel

logger = logging.getLogger(__name__)

SERVING_BATCH_SIZES = (1, 4, 16, 64, 256, 1024)  # the tables' grid: the law is linear between
SERVING_CONTEXTS = (0, 1024, 8192, 131072)  # tokens before the step, a row's mean
HELD_OUT_EVERY = 5  # every fifth step is held out of the refit that measures the error
OUTLIER_SPREAD = 8.0  # a step missed by more than median + this many MADs is left out of the refit
MIN_STEPS = 10  # the fewest steps without prefill a fit needs (its held-out refit, 8)


@dataclasses.dataclass(frozen=True)
class ServedStep:
    """One vLLM engine step as the proposer saw it, between its previous call and this one.

    Attributes:
        rows: requests that decoded in the step (emitted >= 1 token).
        verified: tokens the target scored for them: the sum of 1 + the tokens proposed to each.
        context: the sum over those rows of their tokens before the step (what attention reads).
        prefill_rows: requests that were prefilling (emitted nothing) or first appeared.
        prefill_tokens: the prompt tokens of requests that first appeared (an upper bound of what
            was prefilled).
        seconds: wall seconds from the end of the previous call to the start of this one (vLLM's
            verify forward, sampling, scheduling).
        draft_rows: rows the draft model drafted for in the previous call.
        drafted: tokens the draft model drafted in that call (over its rows).
        draft_forwards: sequential draft forwards that call ran (its largest k; 0 without the
            draft model).
        draft_seconds: seconds that call spent in the draft model's forwards.
        propose_seconds: seconds that whole call took (its own work, lookup included).
    """

    rows: int
    verified: int
    context: int
    prefill_rows: int
    prefill_tokens: int
    seconds: float
    draft_rows: int
    drafted: int
    draft_forwards: int
    draft_seconds: float
    propose_seconds: float

    def __post_init__(self) -> None:
        """Check every field, and hold numpy's numbers as Python's (so the step writes as JSON)."""
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            counts = field.type == "int"
            kind, what = (numbers.Integral, "an integer") if counts else (numbers.Real, "a number")
            if isinstance(value, bool) or not isinstance(value, kind):
                raise ValueError(f"{field.name} must be {what}, got {value!r}")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{field.name} must be finite and >= 0, got {value!r}")
            object.__setattr__(self, field.name, int(value) if counts else float(value))
        if self.verified < self.rows:
            raise ValueError(
                f"verified ({self.verified}) must be at least rows ({self.rows}): a row scores >= 1 token"
            )
        if self.draft_seconds > self.propose_seconds:
            raise ValueError(
                f"draft_seconds ({self.draft_seconds}) must not exceed propose_seconds "
                f"({self.propose_seconds}): the draft's forwards are part of the call"
            )

    @property
    def step_seconds(self) -> float:
        """The step's whole time: vLLM's part and the proposer's call before it."""
        return self.seconds + self.propose_seconds

    @classmethod
    def from_dict(cls, data: Any) -> ServedStep:
        """Build from a mapping with exactly the fields; ValueError naming what is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"a step is a JSON object, got {type(data).__name__}")
        names = [field.name for field in dataclasses.fields(cls)]
        missing, unknown = [n for n in names if n not in data], sorted(set(data) - set(names))
        if missing or unknown:
            raise ValueError(f"missing fields {missing}, unknown fields {unknown}")
        return cls(**data)


def write_served_steps(path: str | Path, steps: Sequence[ServedStep]) -> None:
    """Write ``steps`` as JSON lines, one object a step, atomically."""
    text = "".join(json.dumps(dataclasses.asdict(step)) + "\n" for step in steps)
    write_text_atomic(path, text)


def read_served_steps(path: str | Path) -> list[ServedStep]:
    """The steps of a JSON-lines file (blank lines skipped; a last line cut short while it was
    being written left out: :func:`specrl.io.json_lines`).

    Raises:
        LatencyError: the file is missing, or a line is not a valid step (names the file and line).
    """
    try:
        records = list(json_lines(path))
    except OSError as error:
        raise LatencyError(f"{path}: cannot read the served steps ({error})") from None
    except ValueError as error:  # names the file and the line that is not JSON
        raise LatencyError(str(error)) from None
    steps = []
    for number, record in records:
        try:
            steps.append(ServedStep.from_dict(record))
        except (ValueError, TypeError) as error:
            raise LatencyError(f"{path}, line {number}: not a served step: {error}") from None
    return steps


# ---- the fit ------------------------------------------------------------------------------------


# part -> (its terms, its measured seconds) per step: the module doc's law. The prefill's seconds
# are the step's, less the verify's law (in _fit_parts).
_PARTS = {
    "verify": (lambda s: (1.0, s.rows, s.verified, s.context), lambda s: s.seconds),
    "prefill": (lambda s: (1.0, s.prefill_tokens), lambda s: s.seconds),
    "draft": (
        lambda s: (1.0, s.draft_rows, s.draft_forwards - 1, (s.draft_forwards - 1) * s.draft_rows),
        lambda s: s.draft_seconds,
    ),
    "overhead": (lambda s: (1.0, s.rows), lambda s: s.propose_seconds - s.draft_seconds),
}


def _columns(steps: Sequence[ServedStep], part: str) -> tuple[np.ndarray, np.ndarray]:
    """(terms (N, T), measured seconds (N,)) of one part of the law over ``steps``."""
    terms, measured = _PARTS[part]
    x = np.array([terms(step) for step in steps], dtype=np.float64).reshape(len(steps), -1)
    return x, np.array([measured(step) for step in steps], dtype=np.float64)


def _relative_nnls(x: np.ndarray, y: np.ndarray, offset: np.ndarray | float = 0.0) -> np.ndarray:
    """Coefficients >= 0 of y ~ x, each point's error relative to its modeled seconds (``offset``,
    a part already modeled, + x c): weighted by the measured ones first, then by the fit's (so a
    point whose noise drew it low does not weigh more, and the sum is not biased low), then refitted
    without the points missed by more than median + OUTLIER_SPREAD MADs."""
    from scipy.optimize import nnls

    def fit(weight: np.ndarray, kept: np.ndarray) -> np.ndarray:
        return nnls(x[kept] * weight[kept, None], y[kept] * weight[kept])[0]

    def weights(modeled: np.ndarray) -> np.ndarray:
        return 1.0 / np.maximum(modeled, modeled[modeled > 0].min() if (modeled > 0).any() else 1.0)

    everything = np.ones(len(y), dtype=bool)
    coefficients = fit(weights(offset + y), everything)
    weight = weights(offset + x @ coefficients)
    coefficients = fit(weight, everything)
    miss = np.abs(x @ coefficients - y) * weight
    median = np.median(miss)
    kept = miss <= median + OUTLIER_SPREAD * max(1.4826 * np.median(np.abs(miss - median)), 1e-3)
    if kept.sum() >= x.shape[1] and not kept.all():
        coefficients = fit(weight, kept)
    return coefficients


def _fit_parts(steps: Sequence[ServedStep]) -> dict[str, np.ndarray | None]:
    """Every part's coefficients (None for a part too few steps show: no prefill, no draft model)."""
    decoding = [s for s in steps if not s.prefill_rows]
    parts: dict[str, np.ndarray | None] = {"verify": _relative_nnls(*_columns(decoding, "verify"))}
    prefilling = [s for s in steps if s.prefill_rows]
    parts["prefill"] = None
    if len(prefilling) >= 2:  # over the verify's residual, relative to the step's seconds
        x, seconds = _columns(prefilling, "prefill")
        decode = _columns(prefilling, "verify")[0] @ parts["verify"]
        parts["prefill"] = _relative_nnls(x, seconds - decode, decode)
    drafting = [s for s in steps if s.draft_forwards]
    parts["draft"] = _relative_nnls(*_columns(drafting, "draft")) if len(drafting) >= 4 else None
    parts["overhead"] = _relative_nnls(*_columns(steps, "overhead"))
    return parts


def _modeled(parts: dict[str, np.ndarray | None], steps: Sequence[ServedStep]) -> dict[str, np.ndarray]:
    """Per step, the law's seconds of each part (0 for a part not fitted)."""
    out = {}
    for part, coefficients in parts.items():
        x, _ = _columns(steps, part)
        out[part] = np.zeros(len(steps)) if coefficients is None else x @ coefficients
    out["prefill"] *= np.array([bool(s.prefill_rows) for s in steps])
    out["draft"] *= np.array([bool(s.draft_forwards) for s in steps])
    return out


def _errors(modeled: np.ndarray, measured: np.ndarray) -> dict[str, float] | None:
    """Median and p90 of |modeled / measured - 1| per step, and the sum's signed relative error."""
    keep = measured > 0
    if not keep.any():
        return None
    relative = np.abs(modeled[keep] / measured[keep] - 1)
    return {
        "median": float(np.median(relative)),
        "p90": float(np.quantile(relative, 0.9)),
        "total": float(modeled[keep].sum() / measured[keep].sum() - 1),
        "steps": int(keep.sum()),
    }


def held_out_error(steps: Sequence[ServedStep], every: int = HELD_OUT_EVERY) -> dict[str, Any]:
    """Refit without every ``every``-th step and compare those steps: their whole time (verify,
    overhead and draft) without and with prefill, vLLM's part, and the draft's."""
    held = [s for i, s in enumerate(steps) if i % every == every - 1]
    parts = _fit_parts([s for i, s in enumerate(steps) if i % every != every - 1])
    modeled = _modeled(parts, held)
    whole = modeled["verify"] + modeled["prefill"] + modeled["overhead"] + modeled["draft"]
    measured = np.array([s.step_seconds for s in held])
    prefilled = np.array([bool(s.prefill_rows) for s in held])
    drafted = np.array([bool(s.draft_forwards) for s in held])
    return {
        "method": "serving",
        "heldout": f"every {every}th step",
        "steps": len(steps),
        "step": _errors(whole[~prefilled], measured[~prefilled]),
        "verify": _errors(modeled["verify"][~prefilled], np.array([s.seconds for s in held])[~prefilled]),
        "draft": _errors(modeled["draft"][drafted], np.array([s.draft_seconds for s in held])[drafted]),
        "prefill_step": _errors(whole[prefilled], measured[prefilled]),
    }


def fit_serving_latency(
    steps: Sequence[ServedStep],
    *,
    pair: str = "any",
    device: str = "any",
    dtype: str = "any",
    k_max: int = 8,
    measurement: dict[str, Any] | None = None,
) -> LatencyModel:
    """The serving engine's latency model (kind "serving") from its recorded ``steps`` (the module
    doc), with the held-out error of :func:`held_out_error`; tables for verifies of up to
    ``k_max + 1`` tokens a row (linear beyond).

    Raises:
        LatencyError: too few steps without prefill, or steps that are all free.
    """
    decoding = sum(not s.prefill_rows for s in steps)
    if decoding < MIN_STEPS:
        raise LatencyError(
            f"{decoding} recorded steps without prefill; the serving fit needs at least {MIN_STEPS}: "
            "record more steps (a longer or busier run)"
        )
    parts = _fit_parts(steps)
    a, b, c, d = parts["verify"]
    o0, o1 = parts["overhead"]
    if a + b + c + o0 + o1 <= 0:
        raise LatencyError("the recorded steps fit a free verify: are their seconds all 0?")
    draft = np.zeros(4) if parts["draft"] is None else parts["draft"]
    if parts["draft"] is None:
        logger.warning("serving latency: no recorded step drafted with the draft model: its draft costs 0")
    sizes = np.array(SERVING_BATCH_SIZES, dtype=np.float64)[:, None, None]  # (B, 1, 1)
    tokens = np.arange(1, k_max + 2, dtype=np.float64)[None, :, None]  # (1, n_max, 1)
    contexts = np.array(SERVING_CONTEXTS, dtype=np.float64)[None, None, :]  # (1, 1, C)
    target = a + o0 + (b + o1) * sizes + c * sizes * tokens + d * sizes * contexts  # (B, n_max, C)
    first = np.broadcast_to(draft[0] + draft[1] * sizes[:, 0], (len(sizes), len(SERVING_CONTEXTS)))
    following = np.broadcast_to(draft[2] + draft[3] * sizes[:, 0], first.shape)
    prefill = (0.0, 0.0) if parts["prefill"] is None else tuple(parts["prefill"])
    coefficients = {part: None if value is None else value.tolist() for part, value in parts.items()}
    return LatencyModel(
        pair,
        device,
        SERVING_CONTEXTS,
        target,
        first,
        draft_next_table=following,
        dtype=dtype,
        batch_sizes=SERVING_BATCH_SIZES,
        kind="serving",
        fit_error=held_out_error(steps),
        measurement={
            **(measurement or {}),
            "method": "serving",
            "coefficients": coefficients,
            "steps": len(steps),
            "covers": _covers(steps),
            "sampled": "not measured: vLLM verifies point masses, the sampled tables equal the greedy ones",
        },
        drafter_costs={LOOKUP_DRAFTER: 0.0},  # the lookup's work is in the overhead, every step
        prefill=(*prefill, 0.0, 0.0),
    )


def _covers(steps: Sequence[ServedStep]) -> dict[str, list[float]]:
    """The range of each variable the steps cover (the law is extrapolated beyond them)."""
    return {
        name: [min(getattr(s, name) for s in steps), max(getattr(s, name) for s in steps)]
        for name in ("rows", "verified", "context", "prefill_tokens", "draft_rows", "draft_forwards")
    }
