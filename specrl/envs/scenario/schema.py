"""The scenario's schema: one frozen pydantic dataclass per section, each field with its type, its
default and its checks (the one place defaults live; the package doc describes the file). Built in
Python, a section coerces as pydantic's lax mode does; a scenario file is validated strictly
(:mod:`~specrl.envs.scenario.parsing`)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, asdict, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

import numpy as np
from pydantic import ConfigDict, Field
from pydantic.dataclasses import dataclass

from specrl.action_layout import check_drafters, check_grid
from specrl.embedded.corpus import SPLITS
from specrl.engine.sampling import SamplingConfig
from specrl.envs.scenario.pairs import PairInfo, PairSpec
from specrl.envs.scenario.prompt_files import (
    DEFAULT_SPLIT_FRACTIONS,
    PRESPLIT_SUFFIXES,
    SPLIT_SUFFIXES,
    PromptFile,
    read_prompt_file,
)
from specrl.latency import CostModel, LatencyModel

if TYPE_CHECKING:
    from specrl.models import ModelPair

DEFAULT_TAU_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DEFAULT_STOP_GRID = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8)
TimeMode = Literal["wallclock", "modeled"]
TIME_MODES = get_args(TimeMode)
LoadUnit = Literal["seconds", "plain"]  # BatchSpec.load_unit
RecordedBy = Literal["specrl", "vllm"]  # Scenario.recorded_by
Count = Annotated[int, Field(ge=1)]
Positive = Annotated[float, Field(gt=0)]
LATENCY_SOURCES = ("calibrated", "constant")  # or the path of a latency JSON file
# SPLITS: the disjoint prompt splits train, validation, test (docs/design.md section 4b), defined
# where the embedded pairs' prompts are cut (specrl.embedded.corpus) and imported here.
# The keys of a prompts section that read and split a .jsonl or .txt prompts file.
FILE_KEYS = ("text_field", "domain_field", "file_domain", "split_seed", "split_fractions")
# Every section refuses unknown keys and infinite or NaN numbers.
SECTION = ConfigDict(extra="forbid", allow_inf_nan=False)


class ScenarioError(ValueError):
    """A scenario file or config is invalid; the message names the key and the fix."""


class SetupError(ScenarioError):
    """What a scenario needs on this machine (traces, a calibrated latency model) is not there yet,
    and nothing asked to make it; the message names the command that does, and the flag
    (``prepare=True``) that makes it on the spot."""


@dataclass(frozen=True, config=SECTION)
class PromptSpec:
    """Where prompts come from.

    Attributes:
        domains: domain -> weight; an episode draws a domain with these weights, then a
            prompt uniformly from that domain's set.
        split: "train" (what PPO trains on), "validation" (checkpoint selection and tuning)
            or "test" (reported results; nothing is selected on it).
        file: a prompt file (a relative path is read from the scenario file's folder); default:
            the embedded pair's own prompt sets. Its suffix says its format
            (:mod:`specrl.envs.scenario.prompt_files`); a ``.jsonl`` or ``.txt`` file is split
            into train, validation and test by a seeded hash of each prompt's text, and the
            keys below apply to those two only.
        text_field: the field of a JSONL record that holds the prompt.
        domain_field: the field of a JSONL record that holds its domain; then ``domains`` must
            be given. None: every prompt of the file is in one domain, ``file_domain``.
        file_domain: that one domain's name; None: the file's stem (``faq.jsonl`` -> ``faq``).
            Read from a scenario file, ``domains`` defaults to ``{that domain: 1.0}``.
        split_seed: the seed of the hash that splits the prompts; another seed, another split.
        split_fractions: split -> the share of the prompts it gets (each of ``SPLITS``, >= 0,
            summing to 1).
        chat: each prompt is a user message for an instruct model: it is decoded through the
            pair tokenizer's chat template, up to the assistant's turn (from a file or the pair).
    """

    domains: Mapping[str, float] = field(default_factory=lambda: {"code": 1.0})
    split: str = "train"
    file: str | None = None
    text_field: str = "text"
    domain_field: str | None = None
    file_domain: str | None = None
    split_seed: int = 0
    split_fractions: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_SPLIT_FRACTIONS))
    chat: bool = False

    def __post_init__(self) -> None:
        if not self.domains:
            raise ValueError("prompts.domains is empty: give at least one domain, e.g. {code: 1.0}")
        for domain, weight in self.domains.items():
            if not weight >= 0:
                raise ValueError(f"prompts.domains.{domain}: a weight must be a number >= 0, got {weight!r}")
        if sum(self.domains.values()) <= 0:
            raise ValueError("prompts.domains: the weights sum to 0; give at least one a positive weight")
        if self.split not in SPLITS:
            raise ValueError(f"prompts.split must be one of {SPLITS}, got {self.split!r}")
        self._check_file()

    def _check_file(self) -> None:
        """The file's suffix, and the keys that read and split a ``.jsonl`` or ``.txt`` file."""
        suffix = Path(self.file).suffix.lower() if self.file else None
        if suffix is not None and suffix not in (*SPLIT_SUFFIXES, *PRESPLIT_SUFFIXES):
            raise ValueError(
                f"prompts.file '{self.file}': a prompt file ends in .jsonl (one JSON record per line), "
                ".txt (prompts separated by blank lines) or .json/.yaml/.yml (already split, "
                "{split: {domain: [text, ...]}})"
            )
        given = [
            f.name
            for f in fields(self)
            if f.name in FILE_KEYS
            and getattr(self, f.name) != (f.default if f.default_factory is MISSING else f.default_factory())
        ]
        if given and suffix not in SPLIT_SUFFIXES:
            what = f"prompts.file is '{self.file}'" if self.file else "there is no prompts.file"
            raise ValueError(
                f"prompts.{given[0]} applies to a .jsonl or .txt prompts.file only ({what}); remove it"
            )
        if suffix == ".txt" and {"text_field", "domain_field"} & set(given):
            key = "text_field" if "text_field" in given else "domain_field"
            raise ValueError(
                f"prompts.{key} names a field of a JSONL record; a .txt file has none: remove it"
            )
        if self.domain_field is not None and self.file_domain is not None:
            raise ValueError(
                "prompts: give domain_field (each record's domain) or file_domain (one for the whole "
                "file), not both"
            )
        for key in ("text_field", "domain_field", "file_domain"):
            if getattr(self, key) == "":
                raise ValueError(f"prompts.{key} must not be empty")
        fractions = dict(self.split_fractions)
        if sorted(fractions) != sorted(SPLITS) or any(not value >= 0 for value in fractions.values()):
            raise ValueError(
                f"prompts.split_fractions must give each of {list(SPLITS)} a share >= 0, got {fractions}"
            )
        if abs(sum(fractions.values()) - 1) > 1e-6:
            raise ValueError(
                f"prompts.split_fractions must sum to 1, got {fractions} (sum {sum(fractions.values())})"
            )

    @property
    def single_domain(self) -> str | None:
        """The domain of every prompt of a ``.jsonl`` or ``.txt`` file without ``domain_field``:
        ``file_domain``, else the file's stem; None otherwise."""
        if self.file is None or Path(self.file).suffix.lower() not in SPLIT_SUFFIXES or self.domain_field:
            return None
        return self.file_domain or Path(self.file).stem

    def read_file(self) -> PromptFile:
        """``file``'s prompt sets, a ``.jsonl`` or ``.txt`` file split by ``split_seed`` and
        ``split_fractions`` (:func:`~specrl.envs.scenario.prompt_files.read_prompt_file`)."""
        return read_prompt_file(
            self.file,
            text_field=self.text_field,
            domain_field=self.domain_field,
            domain=self.single_domain,
            seed=self.split_seed,
            fractions=self.split_fractions,
        )

    def file_digest(self) -> str | None:
        """A digest of ``file``'s bytes and of the keys that read and split it (None without a
        file, or with one not there): trace caches key on it, so that editing the file records
        its traces again."""
        if self.file is None or not Path(self.file).is_file():
            return None
        settings = {k: v for k, v in asdict(self).items() if k not in ("domains", "split", "file", "chat")}
        digest = hashlib.sha256(Path(self.file).read_bytes())
        digest.update(json.dumps(settings, sort_keys=True).encode())
        return digest.hexdigest()[:16]

    def draw_domain(self, rng: np.random.Generator, among: Sequence[str] | None = None) -> str:
        """A domain drawn with these weights by one draw of ``rng``, among ``among`` (default: the
        domains as listed), those of weight 0 left out: how every env and request stream picks one."""
        names = [domain for domain in (among or self.domains) if self.domains.get(domain, 0) > 0]
        weights = np.array([self.domains[domain] for domain in names], dtype=float)
        return names[int(rng.choice(len(names), p=weights / weights.sum()))]


@dataclass(frozen=True, config=SECTION)
class DomainShift:
    """After ``after_tokens`` tokens of the episode, a prompt of ``domain`` is appended."""

    after_tokens: int
    domain: str


@dataclass(frozen=True, config=SECTION)
class BatchSpec:
    """How many sequences decode together in the replay env (``specrl/TraceReplay-v0``,
    ``specrl/BatchReplay-v0``); the default, one request, is a single sequence.

    Attributes:
        size: rows of a fixed batch: a row that finishes is replaced by the next request at once,
            so the batch always holds ``size`` rows (used when ``load`` is empty).
        load: an arrival load instead, ``[[duration, rate], ...]``: requests arrive as a Poisson
            process whose rate is piecewise constant in modeled time (the phases repeat); a
            request waits for a free row, so the batch grows and shrinks with the load
            (continuous batching). Its unit is ``load_unit``'s.
        load_unit: "seconds": durations in seconds, rates in requests per second, the same on
            every machine. "plain": relative to the machine that serves, so that a load means the
            same on a slow CPU and on a GPU: durations in *plain request times*, rates in requests
            per plain request time, where a plain request time is the time plain decoding with
            the batch full (``max_size`` rows) takes per request it serves (``max_new_tokens`` over
            its throughput there). A rate of 1 is then plain decoding's capacity; a phase's
            duration times its rate, the requests it brings, does not depend on the machine
            (:meth:`seconds_load`).
        max_size: the most rows at once under ``load``.
        requests: requests an episode serves (each replays one trace of the scenario).
        share: one request's share of a fixed batch of ``size`` rows that all act as it does:
            its steps are priced as the batch's, divided by ``size``, and its features see
            ``size`` rows (rho, tokens over its share of seconds, is the batch's plain
            throughput). What a per-request controller in a serving engine pays for its own
            choices (the engine prices every row alike and adds the rows' tokens verified); one
            request, no load.
    """

    size: Count = 1
    load: tuple[tuple[float, float], ...] = ()
    load_unit: LoadUnit = "seconds"
    max_size: Count = 64
    requests: Count = 1
    share: bool = False

    def __post_init__(self) -> None:
        if self.share and (self.load or self.requests > 1):
            raise ValueError(
                "batch.share replays one request as a row of a fixed batch of `size` rows: "
                f"drop load and requests (got load={list(self.load)}, requests={self.requests})"
            )
        for phase in self.load:
            if not phase[0] > 0 or not phase[1] >= 0:
                raise ValueError(
                    f"batch.load: each phase is [seconds > 0, requests_per_second >= 0], got {list(phase)}"
                )
        if self.load and not any(rate > 0 for _, rate in self.load):
            raise ValueError("batch.load: every phase has rate 0; no request would ever arrive")

    def seconds_load(
        self, latency: LatencyModel | None, request_tokens: int
    ) -> tuple[tuple[float, float], ...]:
        """``load`` as ``[(seconds, requests_per_second), ...]`` on the machine ``latency`` prices,
        for requests of ``request_tokens`` tokens (``load_unit``; ``latency`` is needed for "plain").

        Raises:
            ValueError: a "plain" load and no latency model.
        """
        if self.load_unit == "seconds":
            return self.load
        if latency is None:
            raise ValueError(
                "batch.load is in plain request times (load_unit: plain), which depend on the machine: "
                "pass the latency model of the machine that serves (Scenario.latency_model(pair))"
            )
        unit = request_tokens / latency.plain_throughput(self.max_size)  # seconds per plain request
        return tuple((duration * unit, rate / unit) for duration, rate in self.load)

    @property
    def arrivals(self) -> bool:
        """Requests arrive over time (``load``) rather than a fixed batch."""
        return bool(self.load)

    @property
    def capacity(self) -> int:
        """The most rows decoded at once (for ``share``, the one replayed)."""
        if self.share:
            return 1
        return self.max_size if self.arrivals else self.size

    @property
    def shared_by(self) -> int:
        """The rows a replayed row's step price is shared by: ``size`` for ``share``, else 1 (a
        batch's rows are each replayed)."""
        return self.size if self.share else 1

    @property
    def nominal_rows(self) -> int:
        """The rows at which rho, plain decoding's throughput, is taken: the fixed size, or half
        the most rows under a load."""
        return max(1, self.max_size // 2) if self.arrivals else self.size

    @property
    def batched(self) -> bool:
        """More than one request: a batch of requests, priced by a latency model over batch sizes
        (one request is a single sequence)."""
        return self.requests > 1 or self.arrivals


@dataclass(frozen=True, config=SECTION)
class RewardSpec:
    """How a step is scored: see :mod:`specrl.envs.reward`.

    Attributes:
        time: "wallclock" (the step's measured, device-synchronised seconds) or "modeled"
            (the scenario's latency model: deterministic).
        reference_tokens_per_s: rho; None = plain-decoding throughput under the scenario's
            latency model (:attr:`LatencyModel.plain_tokens_per_s`), so that a plain step earns
            about 0. The ordering of policies by return does not depend on it.
        scale: the reward is divided by it (> 0).
    """

    time: TimeMode = "wallclock"
    reference_tokens_per_s: Positive | None = None
    scale: Positive = 1.0


@dataclass(frozen=True, config=SECTION)
class Scenario:
    """Everything a :class:`~specrl.envs.SpecDecodeEnv` episode depends on; a scenario file's
    top-level keys are these fields (the module doc describes the file)."""

    name: str = "custom"  # load_scenario uses the file name
    description: str = ""  # one line for tables and logs
    pair: PairSpec = field(default_factory=PairSpec)  # the (target, draft) pair
    prompts: PromptSpec = field(default_factory=PromptSpec)  # domains, split, prompt file
    sampling: SamplingConfig = field(default_factory=SamplingConfig)  # for target and draft alike
    max_new_tokens: Count = 128  # tokens per episode
    stop_at_eos: bool = True  # an episode ends early at EOS
    k_max: Count = 8  # the action k runs over 0..k_max
    tau_grid: tuple[float, ...] = DEFAULT_TAU_GRID  # the action's confidence thresholds tau
    stop_grid: tuple[float, ...] = DEFAULT_STOP_GRID  # per-token stop thresholds (module doc)
    drafters: tuple[str, ...] = ("draft",)  # the drafters the action chooses among (module doc)
    reward: RewardSpec = field(default_factory=RewardSpec)  # time source, rho, scale
    latency: str = "calibrated"  # calibrated | constant | PATH.json (module doc)
    cost_model: CostModel = field(default_factory=CostModel)  # the constants of latency: constant
    shift: tuple[DomainShift, ...] = ()  # domain shifts within an episode
    batch: BatchSpec = field(default_factory=BatchSpec)  # rows decoded together (batch simulator)
    # the engine that decodes the traces: specrl's own, or vLLM with specrl's proposer recording
    # (`specrl collect --engine vllm`); part of the trace files' key
    recorded_by: RecordedBy = "specrl"
    source: str | None = None  # the file it was loaded from, if any (not a key of the file)

    def __post_init__(self) -> None:
        check_grid("tau_grid", self.tau_grid)
        check_grid("stop_grid", self.stop_grid, from_zero=True)
        check_drafters(list(self.drafters))
        last = 0
        for shift in self.shift:
            if not last < shift.after_tokens < self.max_new_tokens:
                raise ValueError(
                    f"shift: after_tokens must increase and lie strictly between 0 and max_new_tokens "
                    f"({self.max_new_tokens}), got {shift.after_tokens}"
                )
            last = shift.after_tokens
        if self.latency not in LATENCY_SOURCES and not self.latency.endswith(".json"):
            raise ValueError(
                f"latency must be one of {LATENCY_SOURCES} or the path of a latency .json file "
                f"(written by specrl calibrate), got {self.latency!r}"
            )

    def latency_model(
        self, pair: ModelPair | PairInfo, progress: bool = True, calibrate: bool = True
    ) -> LatencyModel:
        """The latency model of ``latency`` for ``pair``, as the view for this scenario's sampling:
        :func:`specrl.envs.scenario.sources.latency_model`."""
        from specrl.envs.scenario.sources import latency_model

        return latency_model(self, pair, progress, calibrate)

    def reference_throughput(self, latency: LatencyModel | None) -> float:
        """rho of the reward (tokens/s): ``reward.reference_tokens_per_s``, else the latency
        model's plain-decoding throughput under this scenario's sampling, at the batch's nominal
        rows (one for a single sequence; then ``latency`` is required)."""
        if self.reward.reference_tokens_per_s is not None:
            return self.reward.reference_tokens_per_s
        if latency is None:
            raise ValueError(
                "reward.reference_tokens_per_s is null, so rho comes from the latency model: pass one"
            )
        return latency.for_sampling(self.sampling).plain_throughput(self.batch.nominal_rows)

    @property
    def needs_latency(self) -> bool:
        """Whether an episode needs a latency model: modeled time, or rho taken from it."""
        return self.reward.time == "modeled" or self.reward.reference_tokens_per_s is None

    @property
    def domains(self) -> list[str]:
        """Every domain an episode may use: the prompt mix and the shift targets."""
        names = [d for d, weight in self.prompts.domains.items() if weight > 0]
        return names + [s.domain for s in self.shift if s.domain not in names]

    def with_overrides(
        self, split: str | None = None, time: str | None = None, preset: str | None = None
    ) -> Scenario:
        """A copy with the prompt split, the time source and/or the embedded pair preset replaced."""
        scenario = self
        if preset is not None:
            scenario = replace(scenario, pair=replace(scenario.pair, preset=preset))
        if split is not None:
            scenario = replace(scenario, prompts=replace(scenario.prompts, split=split))
        if time is not None:
            scenario = replace(scenario, reward=replace(scenario.reward, time=time))
        return scenario

    def prompt_sets(self, pair: ModelPair | PairInfo) -> dict[str, list[str]]:
        """Domain -> prompt texts of this scenario's split
        (:func:`specrl.envs.scenario.sources.prompt_sets`)."""
        from specrl.envs.scenario.sources import prompt_sets

        return prompt_sets(self, pair)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _origin(self) -> str:
        return self.source or f"scenario '{self.name}'"

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>", base_dir: Path | None = None) -> Scenario:
        """Build and validate a scenario from plain data (the contents of a YAML file); errors are
        ScenarioErrors that name ``source``, the key and the fix."""
        from specrl.envs.scenario.parsing import parse

        return parse(data, source, base_dir or Path.cwd())
