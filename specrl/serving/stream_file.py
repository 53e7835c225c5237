"""Request streams: which requests arrive in which order, and how the draft adapts to them.

A stream file (``specrl/streams/*.yaml``, or any path) names what differs from the defaults of the
dataclasses below. Its segments run in order; each holds a count of requests per domain, dealt in a
seeded random order within the segment, so the domain mix changes over time::

    description: "Code, then mostly arithmetic, then prose."
    pair: {preset: small}
    split: test
    segments:
      - {name: code, requests: {code: 20, prose: 4}}
      - {name: math, requests: {math: 32, code: 4, prose: 4}}
      - {name: prose, requests: {prose: 20, code: 4}}
    adaptation: {every: 8, steps: 16, adapt_below: 0.5}

A prompt is used at most once per stream (a repeated greedy request would be an exact copy of a
request the draft was just trained on). Errors name the file, the key and the fix: ``StreamError``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from specrl.embedded.corpus import SPLITS
from specrl.engine.sampling import SamplingConfig
from specrl.envs.scenario import PairSpec, ScenarioError
from specrl.envs.scenario.parsing import check_leaf, check_leaves, check_mapping

STREAM_DIR = Path(__file__).resolve().parents[1] / "streams"


class StreamError(ScenarioError):
    """A stream file that cannot be used as written (the message names the key and the fix)."""


@dataclass(frozen=True)
class Segment:
    """A stretch of the stream: ``requests`` maps domain -> number of requests of that domain."""

    name: str
    requests: Mapping[str, int]

    def __post_init__(self) -> None:
        if not self.requests:
            raise ValueError(f"segment '{self.name}': requests is empty; give counts, e.g. {{math: 8}}")
        for domain, count in self.requests.items():
            if not (isinstance(count, int) and not isinstance(count, bool) and count >= 0):
                raise ValueError(
                    f"segment '{self.name}': requests.{domain} must be a count >= 0, got {count!r}"
                )
        if sum(self.requests.values()) == 0:
            raise ValueError(f"segment '{self.name}': every count is 0; give it at least one request")

    @property
    def size(self) -> int:
        return sum(self.requests.values())


@dataclass(frozen=True)
class AdaptationSpec:
    """How the draft is re-distilled on recent traffic (:mod:`specrl.serving.adaptation`).

    Attributes:
        every: adapt after every ``every`` requests served; 0 never adapts.
        window: the most recent requests an adaptation learns from and is judged on.
        replay: older requests kept besides the window (a uniform sample of all that left it), so
            that a draft adapted to a new domain is still trained and judged on the earlier ones.
        holdout: the share of requests held back, evenly spaced along the stream (one in four for
            0.25): they never train a draft, and a candidate must do better on them than the live
            draft.
        steps: optimizer steps per adaptation: the step budget, never exceeded.
        batch_size: sequences (prompt + output) per step.
        lr: AdamW learning rate (constant over an adaptation's few steps).
        temperature: the distillation temperature T of the KL term (as the embedded pair's distillation).
        alpha: weight of the KL term; 1 - alpha on the LM loss (as the embedded pair's distillation).
        min_gain: a candidate goes live only if its held-back acceptance beats the live draft's by
            more than this.
        adapt_below: adapt only when the live draft's acceptance on the requests served since the
            last adaptation point is below this (a draft still in its domain is left alone; 1.0
            adapts every time).
    """

    # the defaults: the setting chosen on the validation split of the shipped stream
    every: int = 8
    window: int = 32
    replay: int = 0
    holdout: float = 0.25
    steps: int = 16
    batch_size: int = 8
    lr: float = 3e-4
    temperature: float = 2.0
    alpha: float = 0.7
    min_gain: float = 0.0
    adapt_below: float = 0.5

    def __post_init__(self) -> None:
        if self.every < 0:
            raise ValueError(f"adaptation.every must be >= 0 (0: never adapt), got {self.every}")
        if self.window < 2:
            raise ValueError(f"adaptation.window must be >= 2 requests, got {self.window}")
        if self.replay < 0:
            raise ValueError(f"adaptation.replay must be >= 0 requests, got {self.replay}")
        if not 0.0 < self.holdout < 1.0:
            raise ValueError(f"adaptation.holdout must lie strictly between 0 and 1, got {self.holdout}")
        for key in ("steps", "batch_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"adaptation.{key} must be >= 1, got {getattr(self, key)}")
        if not 0.0 <= self.adapt_below <= 1.0:
            raise ValueError(f"adaptation.adapt_below must lie in [0, 1], got {self.adapt_below}")
        if not (self.lr > 0 and self.temperature > 0 and 0.0 <= self.alpha <= 1.0):
            raise ValueError(
                "adaptation: lr and temperature must be > 0 and alpha in [0, 1], got "
                f"lr={self.lr}, temperature={self.temperature}, alpha={self.alpha}"
            )


@dataclass(frozen=True)
class StreamSpec:
    """A request stream; a stream file's top-level keys are these fields."""

    name: str = "custom"  # load_stream uses the file name
    description: str = ""
    pair: PairSpec = field(default_factory=PairSpec)
    split: str = "test"  # the prompt split requests are drawn from (validation: to tune adaptation)
    segments: tuple[Segment, ...] = ()
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: int = 64
    seed: int = 0  # the order of requests, their sampling seeds, the holdout coins
    adaptation: AdaptationSpec = field(default_factory=AdaptationSpec)
    source: str | None = None

    def __post_init__(self) -> None:
        if not self.segments:
            raise ValueError("segments is empty: give at least one, e.g. [{name: code, requests: {code: 8}}]")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self.segments)

    def with_split(self, split: str | None) -> StreamSpec:
        return self if split is None else replace(self, split=split)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def shipped_streams() -> list[str]:
    """Names of the stream files shipped in the package (``specrl/streams/``)."""
    return sorted(p.stem for p in STREAM_DIR.glob("*.yaml"))


def load_stream(name: str | Path) -> StreamSpec:
    """A stream file by path, or a shipped stream by name ("code_math_prose")."""
    path = Path(name)
    if not path.is_file() and (STREAM_DIR / f"{name}.yaml").is_file():
        path = STREAM_DIR / f"{name}.yaml"
    if not path.is_file():
        raise StreamError(
            f"no stream file '{name}': give a path to a YAML file or one of the shipped streams "
            f"{shipped_streams()}"
        )
    data = yaml.safe_load(path.read_text())
    try:
        spec = _parse(data, str(path))
    except ScenarioError as error:
        raise StreamError(str(error)) from None
    except ValueError as error:  # a dataclass's own validation
        raise StreamError(f"{path}: {error}") from None
    return replace(spec, name=spec.name if "name" in (data or {}) else path.stem, source=str(path))


def _parse(data: Any, source: str) -> StreamSpec:
    top = check_mapping(data, StreamSpec, "", source)
    kwargs: dict[str, Any] = check_leaves(
        {k: v for k, v in top.items() if k in ("name", "description", "split", "max_new_tokens", "seed")},
        StreamSpec,
        "",
        source,
    )
    if "pair" in top:
        kwargs["pair"] = PairSpec(
            **check_leaves(check_mapping(top["pair"], PairSpec, "pair", source), PairSpec, "pair.", source)
        )
    if "sampling" in top:
        section = check_mapping(top["sampling"], SamplingConfig, "sampling", source)
        kwargs["sampling"] = SamplingConfig(**check_leaves(section, SamplingConfig, "sampling.", source))
    if "adaptation" in top:
        section = check_mapping(top["adaptation"], AdaptationSpec, "adaptation", source)
        kwargs["adaptation"] = AdaptationSpec(**check_leaves(section, AdaptationSpec, "adaptation.", source))
    if "segments" in top:
        if not isinstance(top["segments"], list):
            raise StreamError(f"{source}: 'segments' must be a list of {{name, requests}} mappings")
        segments = []
        for i, item in enumerate(top["segments"]):
            section = check_mapping(item, Segment, f"segments[{i}]", source)
            name = check_leaf(section.get("name", f"segment{i}"), str, f"segments[{i}].name", source)
            requests = section.get("requests")
            if not isinstance(requests, Mapping):
                raise StreamError(
                    f"{source}: 'segments[{i}].requests' must map domains to request counts, "
                    f"e.g. {{math: 8, code: 2}}, got {requests!r}"
                )
            segments.append(Segment(name=name, requests=dict(requests)))
        kwargs["segments"] = tuple(segments)
    return StreamSpec(**kwargs)
