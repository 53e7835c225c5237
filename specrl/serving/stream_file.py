"""Request streams: which requests arrive in which order, and how the draft adapts to them.

A stream file (``specrl/streams/*.yaml``, or any path) names what differs from the defaults of the
dataclasses below. Its segments run in order; each holds a count of requests per domain, dealt in a
seeded random order within the segment, so the domain mix changes over time::

    pair: {preset: small}
    segments:
      - {name: code, requests: {code: 20, prose: 4}}
      - {name: math, requests: {math: 32, code: 4, prose: 4}}
    adaptation: {every: 8, steps: 16, adapt_below: 0.5}

A file is validated strictly as a scenario file is; errors name the file, the key and the fix
(``StreamError``). A prompt is used at most once per stream (a repeated greedy request would copy
one the draft was just trained on).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as section

from specrl.embedded.corpus import SPLITS
from specrl.engine.sampling import SamplingConfig
from specrl.envs.scenario import PairSpec, ScenarioError
from specrl.envs.scenario.schema import SECTION
from specrl.validation import explain, known_fields

STREAM_DIR = Path(__file__).resolve().parents[1] / "streams"
HINTS = {"segments.requests": "a mapping of domains to request counts, e.g. {math: 8, code: 2}"}


class StreamError(ScenarioError):
    """A stream file that cannot be used as written (the message names the key and the fix)."""


@section(frozen=True, config=SECTION)
class Segment:
    """A stretch of the stream: ``requests`` maps domain -> number of requests of that domain."""

    name: str
    requests: Mapping[str, Annotated[int, Field(ge=0)]]

    def __post_init__(self) -> None:
        if sum(self.requests.values()) == 0:
            raise ValueError(f"segment '{self.name}': every count is 0; give it at least one request")

    @property
    def size(self) -> int:
        return sum(self.requests.values())


@section(frozen=True, config=SECTION)
class AdaptationSpec:
    """How the draft is re-distilled on recent traffic (:mod:`specrl.serving.adaptation`); the
    defaults are the setting chosen on the shipped stream's validation split.

    Attributes:
        every: adapt after every ``every`` requests served; 0 never adapts.
        window: the most recent requests an adaptation learns from and is judged on.
        replay: older requests kept besides the window (a uniform sample of all that left it).
        holdout: the share of requests held back, evenly spaced along the stream: they never train
            a draft, and a candidate must beat the live draft on them.
        steps: optimizer steps per adaptation (never exceeded); batch_size: sequences per step.
        lr: AdamW learning rate; temperature, alpha: the distillation loss's (as the embedded pair's).
        min_gain: a candidate goes live only if its held-back acceptance beats the live draft's by
            more than this.
        adapt_below: adapt only when the live draft's acceptance on the requests served since the
            last adaptation point is below this (1.0 adapts every time).
    """

    every: Annotated[int, Field(ge=0)] = 8
    window: Annotated[int, Field(ge=2)] = 32
    replay: Annotated[int, Field(ge=0)] = 0
    holdout: Annotated[float, Field(gt=0, lt=1)] = 0.25
    steps: Annotated[int, Field(ge=1)] = 16
    batch_size: Annotated[int, Field(ge=1)] = 8
    lr: Annotated[float, Field(gt=0)] = 3e-4
    temperature: Annotated[float, Field(gt=0)] = 2.0
    alpha: Annotated[float, Field(ge=0, le=1)] = 0.7
    min_gain: float = 0.0
    adapt_below: Annotated[float, Field(ge=0, le=1)] = 0.5


@section(frozen=True, config=SECTION)
class StreamSpec:
    """A request stream; a stream file's top-level keys are these fields."""

    name: str = "custom"  # load_stream uses the file name
    description: str = ""
    pair: PairSpec = field(default_factory=PairSpec)
    split: str = "test"  # the prompt split requests are drawn from (validation: to tune adaptation)
    segments: tuple[Segment, ...] = ()
    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    max_new_tokens: Annotated[int, Field(ge=1)] = 64
    seed: int = 0  # the order of requests, their sampling seeds, the holdout coins
    adaptation: AdaptationSpec = field(default_factory=AdaptationSpec)
    source: str | None = None

    def __post_init__(self) -> None:
        if not self.segments:
            raise ValueError("segments is empty: give at least one, e.g. [{name: code, requests: {code: 8}}]")
        if self.split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {self.split!r}")

    @property
    def size(self) -> int:
        return sum(segment.size for segment in self.segments)

    def with_split(self, split: str | None) -> StreamSpec:
        return self if split is None else replace(self, split=split)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


SECTIONS = {"pair": PairSpec, "sampling": SamplingConfig, "adaptation": AdaptationSpec, "segments": Segment}
STREAM = TypeAdapter(StreamSpec)


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
    if isinstance(data, Mapping):
        data = {"name": path.stem, **data, "source": str(path)}
    try:
        return STREAM.validate_json(json.dumps(data, default=str), strict=True)
    except ValidationError as error:
        raise StreamError(f"{path}: {explain(error, _known_keys, HINTS)}") from None


def _known_keys(loc: tuple[str | int, ...]) -> list[str]:
    return [key for key in known_fields(SECTIONS[str(loc[0])] if loc else StreamSpec) if key != "source"]


@dataclass(frozen=True)
class Request:
    """One request of the stream: its position (from 0), segment, domain, prompt and sampling seed
    (the same for every setup served). ``held_back`` requests never train a draft: adaptations are
    judged on them. They are evenly spaced (a share ``adaptation.holdout`` of every stretch, with a
    seeded phase), so recent traffic always holds some of a domain that just arrived."""

    index: int
    segment: str
    domain: str
    prompt: str
    seed: int
    held_back: bool


def draw_requests(spec: StreamSpec, prompts: Mapping[str, Mapping[str, list[str]]]) -> list[Request]:
    """The stream's requests: each segment's domain counts in a seeded random order, each domain's
    prompts of ``spec.split`` (``prompts``: split -> domain -> texts, a pair's ``prompts``) taken in
    a seeded random order without repetition.

    Raises:
        StreamError: more requests of a domain than the split has prompts of it.
    """
    rng = random.Random(f"stream:{spec.seed}")
    holdout, phase = spec.adaptation.holdout, rng.random()
    available = prompts.get(spec.split, {})
    needed: dict[str, int] = {}
    for segment in spec.segments:
        for domain, count in segment.requests.items():
            needed[domain] = needed.get(domain, 0) + count
    pools = {}
    for domain, count in needed.items():
        texts = list(available.get(domain, []))
        if count > len(texts):
            raise StreamError(
                f"{spec.source or spec.name}: the stream asks for {count} '{domain}' requests but the "
                f"'{spec.split}' split has {len(texts)} '{domain}' prompts (splits and domains: "
                f"{ {s: sorted(d) for s, d in prompts.items() if s in SPLITS} }); lower the "
                "counts, or use another split or domain"
            )
        rng.shuffle(texts)
        pools[domain] = texts
    requests: list[Request] = []
    for segment in spec.segments:
        order = [domain for domain, count in segment.requests.items() for _ in range(count)]
        rng.shuffle(order)
        for domain in order:
            n = len(requests)
            held_back = int((n + 1) * holdout + phase) > int(n * holdout + phase)
            seed = rng.randrange(2**31)
            requests.append(Request(n, segment.name, domain, pools[domain].pop(), seed, held_back))
    return requests
