"""Scenarios: what an episode decodes and how it is scored. Typed, validated, loaded from YAML.

A scenario file (``specrl/scenarios/*.yaml``, or any path) is a mapping that names only what
differs from the defaults.
The defaults are the field values of the dataclasses below (each field documented where it is
defined), the one place they live; :func:`defaults_yaml` writes every key with its default,
generated from them::

    python -c "from specrl.envs.scenario import defaults_yaml; print(defaults_yaml())"

The keys and the dataclass that holds each section::

    name, description                   Scenario (name: the file name when loaded from a file)
    pair: {...}                         PairSpec: preset, or target and draft; seed, device, dtype,
                                        kv_cache, compile
    prompts: {...}                      PromptSpec: domains (domain -> weight), split, file
    sampling: {...}                     SamplingConfig (specrl.engine.sampling): temperature, top_k, top_p
    max_new_tokens, stop_at_eos, k_max  Scenario
    tau_grid, stop_grid                 Scenario: lists of thresholds in [0, 1]
    drafters                            Scenario: the drafters an action may choose (see below)
    reward: {...}                       RewardSpec: time, reference_tokens_per_s, scale
    latency                             Scenario: calibrated | constant | PATH.json (see below)
    cost_model: {...}                   CostModel (specrl.latency.cost_model): draft_forward_s,
                                        target_forward_s, target_per_token_s
    shift: [...]                        DomainShift per item: {after_tokens, domain}; see SpecDecodeEnv
    batch: {...}                        BatchSpec: size, load, max_size, requests (the batch simulator)

For example, arithmetic sampled at temperature 1 that turns into prose mid-episode::

    description: "Arithmetic, then prose after 64 tokens; sampling at temperature 1."
    prompts:
      domains: {math: 1.0}
    sampling: {temperature: 1.0}
    shift:
      - {after_tokens: 64, domain: prose}

``stop_grid`` is the third action dimension of an env given an acceptance predictor: the
threshold below which the predicted probability that every token drafted so far in the step is
accepted stops drafting (:class:`specrl.controllers.stop_rules.AcceptanceThreshold`, cumulative;
0 never stops). Without a predictor that dimension has the single value 0.

``drafters`` lists the drafters of :mod:`specrl.engine.drafters` the env offers, default
``[draft]``. With more than one, the action gains a last dimension, the index of the drafter in
this list, and traces record each drafter's fields (:mod:`specrl.traces.format`).

``latency`` chooses the :class:`~specrl.latency.LatencyModel` behind ``modeled`` time and the
default rho: ``calibrated`` learns it from the pair's decoding loop on its device once and caches
the result (:func:`specrl.latency.calibrated`); ``constant`` uses the three ``cost_model``
constants (no dependence on the context length or device; fast, for tests); a path (relative to
the scenario file) reads a file written by ``experiments/calibrate.py`` (``--method profile``
writes the fallback that times forwards in isolation: it misses loop effects and sampling cost).

Errors name the file, the key and the fix: ``ScenarioError``.
"""

from __future__ import annotations

import difflib
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

import specrl.latency
from specrl.engine.drafters.registry import DRAFTERS
from specrl.engine.sampling import SamplingConfig
from specrl.latency import CostModel, LatencyModel, device_key
from specrl.latency.calibration import cached_calibration
from specrl.models import CacheSettings, ModelPair, default_device, default_dtype, load_pair
from specrl.zoo.corpus import SPLITS

# Shipped scenarios are package data (specrl/scenarios/*.yaml), so an installed wheel has them.
SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"
# Where they lived before they became package data: "envs/code.yaml" still names the shipped file.
LEGACY_SCENARIO_FOLDER = "envs"
DEFAULT_TAU_GRID = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
DEFAULT_STOP_GRID = (0.0, 0.2, 0.4, 0.5, 0.6, 0.7, 0.8)
TIME_MODES = ("wallclock", "modeled")
LATENCY_SOURCES = ("calibrated", "constant")  # or the path of a latency JSON file
# SPLITS: the disjoint prompt splits train, validation, test (docs/design.md section 4b), defined
# where the embedded pairs' prompts are cut (specrl.zoo.corpus) and imported here.
RETIRED_SPLITS = {"heldout": "validation (checkpoint selection, tuning) or test (reported results)"}


class ScenarioError(ValueError):
    """A scenario file or config is invalid; the message names the key and the fix."""


@dataclass(frozen=True)
class PairSpec:
    """Which (target, draft) pair to load: an embedded preset, or a target and a draft.

    Attributes:
        preset: embedded pair ("small", "tiny"); the default when no target/draft is given.
        target: HF id or local path of the target (with ``draft``).
        draft: HF id or local path of the draft.
        seed: seed of an embedded pair's build.
        device: "cpu", "cuda", ...; default CUDA when present.
        dtype: "float32", "bfloat16", ...; default bf16 on GPU, fp32 on CPU.
        kv_cache: "dynamic" or "static" KV caches for single-sequence decoding.
        compile: ``torch.compile`` the decode forwards (needs ``kv_cache: static``).
    """

    preset: str | None = None
    target: str | None = None
    draft: str | None = None
    seed: int = 0
    device: str | None = None
    dtype: str | None = None
    kv_cache: str = "dynamic"
    compile: bool = False

    def __post_init__(self) -> None:
        try:
            CacheSettings(self.kv_cache, self.compile)
        except ValueError as error:
            raise ValueError(f"pair: {error}") from None
        if (self.target is None) != (self.draft is None):
            raise ValueError("pair: give both 'target' and 'draft', or neither (then 'preset' is used)")
        if self.target is not None and self.preset is not None:
            raise ValueError("pair: give either 'preset' or 'target' and 'draft', not both")

    def load(self) -> ModelPair:
        cache = dict(kv_cache=self.kv_cache, compile=self.compile)
        if self.target is not None:
            return load_pair(self.target, self.draft, device=self.device, dtype=self.dtype, **cache)
        preset = self.preset or "small"
        return load_pair(preset=preset, seed=self.seed, device=self.device, dtype=self.dtype, **cache)

    def info(self) -> PairInfo:
        """What the trace and latency caches key on (name, device, dtype), as :meth:`load`'s pair
        would have them, without loading a model."""
        if self.target is None:
            name = f"specrl-zoo-{self.preset or 'small'}"
        else:
            name = f"{self.target}+{self.draft}"
        device = torch.device(self.device) if self.device is not None else default_device()
        dtype = getattr(torch, self.dtype) if self.dtype is not None else default_dtype(device)
        cache = CacheSettings(self.kv_cache, self.compile)
        return PairInfo(name=name, device=device, dtype=dtype, spec=self, cache=cache)


@dataclass
class PairInfo:
    """A pair not loaded yet: the name, device and dtype that shipped or cached traces and a cached
    latency model are found by (the trace-replay simulator needs nothing else), and :meth:`load`
    for when something must be recorded or measured.

    Attributes:
        name, device, dtype, cache: as the loaded :class:`ModelPair` will have them.
        spec: what :meth:`load` loads.
    """

    name: str
    device: torch.device
    dtype: torch.dtype
    spec: PairSpec
    cache: CacheSettings = field(default_factory=CacheSettings)
    _loaded: ModelPair | None = field(default=None, repr=False, compare=False)

    @property
    def prompts(self) -> dict[str, dict[str, list[str]]]:
        """An embedded pair's prompt sets (read from its folder, no weights loaded); else none."""
        if self.spec.target is not None:
            return {}
        from specrl.zoo.build import PROMPTS, ensure_pair

        return json.loads((ensure_pair(self.spec.preset or "small", self.spec.seed) / PROMPTS).read_text())

    def load(self, why: str) -> ModelPair:
        """The loaded pair (loaded once, with a line on stderr that says ``why``)."""
        if self._loaded is None:
            print(f"specrl: loading the model pair {self.name} to {why}", file=sys.stderr)
            self._loaded = self.spec.load()
        return self._loaded


def loaded_pair(pair: ModelPair | PairInfo, why: str) -> ModelPair:
    """``pair`` itself when loaded, else :meth:`PairInfo.load` (saying ``why``)."""
    return pair.load(why) if isinstance(pair, PairInfo) else pair


@dataclass(frozen=True)
class PromptSpec:
    """Where prompts come from.

    Attributes:
        domains: domain -> weight; an episode draws a domain with these weights, then a
            prompt uniformly from that domain's set.
        split: "train" (what PPO trains on), "validation" (checkpoint selection and tuning)
            or "test" (reported results; nothing is selected on it).
        file: JSON or YAML file ``{split: {domain: [text, ...]}}`` (a relative path is read
            from the scenario file's folder); default: the embedded pair's own prompt sets.
    """

    domains: Mapping[str, float] = field(default_factory=lambda: {"code": 1.0})
    split: str = "train"
    file: str | None = None

    def __post_init__(self) -> None:
        if not self.domains:
            raise ValueError("prompts.domains is empty: give at least one domain, e.g. {code: 1.0}")
        for domain, weight in self.domains.items():
            if not (isinstance(weight, (int, float)) and not isinstance(weight, bool) and weight >= 0):
                raise ValueError(f"prompts.domains.{domain}: a weight must be a number >= 0, got {weight!r}")
        if sum(self.domains.values()) <= 0:
            raise ValueError("prompts.domains: the weights sum to 0; give at least one a positive weight")
        if self.split in RETIRED_SPLITS:
            raise ValueError(
                f"prompts.split '{self.split}' no longer exists: the held-out prompts were divided into "
                f"disjoint splits; write split: {RETIRED_SPLITS[self.split]}"
            )
        if self.split not in SPLITS:
            raise ValueError(f"prompts.split must be one of {SPLITS}, got {self.split!r}")

    def draw_domain(self, rng: np.random.Generator, among: Sequence[str] | None = None) -> str:
        """A domain drawn with these weights by one draw of ``rng``, among ``among`` (default: the
        domains as listed), those of weight 0 left out: how every env and request stream picks one."""
        names = [domain for domain in (among or self.domains) if self.domains.get(domain, 0) > 0]
        weights = np.array([self.domains[domain] for domain in names], dtype=float)
        return names[int(rng.choice(len(names), p=weights / weights.sum()))]


@dataclass(frozen=True)
class DomainShift:
    """After ``after_tokens`` tokens of the episode, a prompt of ``domain`` is appended."""

    after_tokens: int
    domain: str


@dataclass(frozen=True)
class BatchSpec:
    """How many sequences decode together, for the batch simulator (``specrl/BatchReplay-v0``).

    Attributes:
        size: rows of a fixed batch: a row that finishes is replaced by the next request at once,
            so the batch always holds ``size`` rows (used when ``load`` is empty).
        load: a serving load instead, ``[[seconds, requests_per_second], ...]``: requests arrive
            as a Poisson process whose rate is piecewise constant in modeled time (the phases
            repeat); a request waits for a free row, so the batch grows and shrinks with the load
            (continuous batching).
        max_size: the most rows at once under ``load``.
        requests: requests an episode serves (each replays one trace of the scenario).
    """

    size: int = 1
    load: tuple[tuple[float, float], ...] = ()
    max_size: int = 64
    requests: int = 64

    def __post_init__(self) -> None:
        for key in ("size", "max_size", "requests"):
            if getattr(self, key) < 1:
                raise ValueError(f"batch.{key} must be >= 1, got {getattr(self, key)}")
        for phase in self.load:
            if len(phase) != 2 or not phase[0] > 0 or not phase[1] >= 0:
                raise ValueError(
                    f"batch.load: each phase is [seconds > 0, requests_per_second >= 0], got {list(phase)}"
                )
        if self.load and not any(rate > 0 for _, rate in self.load):
            raise ValueError("batch.load: every phase has rate 0; no request would ever arrive")

    @property
    def serving(self) -> bool:
        """Requests arrive over time (``load``) rather than a fixed batch."""
        return bool(self.load)


@dataclass(frozen=True)
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

    time: str = "wallclock"
    reference_tokens_per_s: float | None = None
    scale: float = 1.0

    def __post_init__(self) -> None:
        if self.time not in TIME_MODES:
            raise ValueError(f"reward.time must be one of {TIME_MODES}, got {self.time!r}")
        if self.reference_tokens_per_s is not None and not self.reference_tokens_per_s > 0:
            raise ValueError(
                f"reward.reference_tokens_per_s must be > 0 (or null), got {self.reference_tokens_per_s!r}"
            )
        if not self.scale > 0:
            raise ValueError(f"reward.scale must be > 0, got {self.scale!r}")


@dataclass(frozen=True)
class Scenario:
    """Everything a :class:`~specrl.envs.SpecDecodeEnv` episode depends on; a scenario file's
    top-level keys are these fields (the module doc describes the file)."""

    name: str = "custom"  # load_scenario uses the file name
    description: str = ""  # one line for tables and logs
    pair: PairSpec = field(default_factory=PairSpec)  # the (target, draft) pair
    prompts: PromptSpec = field(default_factory=PromptSpec)  # domains, split, prompt file
    sampling: SamplingConfig = field(default_factory=SamplingConfig)  # for target and draft alike
    max_new_tokens: int = 128  # tokens per episode
    stop_at_eos: bool = True  # an episode ends early at EOS
    k_max: int = 8  # the action k runs over 0..k_max
    tau_grid: tuple[float, ...] = DEFAULT_TAU_GRID  # the action's confidence thresholds tau
    stop_grid: tuple[float, ...] = DEFAULT_STOP_GRID  # per-token stop thresholds (module doc)
    drafters: tuple[str, ...] = ("draft",)  # the drafters the action chooses among (module doc)
    reward: RewardSpec = field(default_factory=RewardSpec)  # time source, rho, scale
    latency: str = "calibrated"  # calibrated | constant | PATH.json (module doc)
    cost_model: CostModel = field(default_factory=CostModel)  # the constants of latency: constant
    shift: tuple[DomainShift, ...] = ()  # domain shifts within an episode
    batch: BatchSpec = field(default_factory=BatchSpec)  # rows decoded together (batch simulator)
    source: str | None = None  # the file it was loaded from, if any (not a key of the file)

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.k_max < 1:
            raise ValueError(f"k_max must be >= 1 (the action k runs over 0..k_max), got {self.k_max}")
        for key in ("tau_grid", "stop_grid"):
            grid = tuple(getattr(self, key))
            if not grid or any(not 0.0 <= value <= 1.0 for value in grid) or list(grid) != sorted(set(grid)):
                raise ValueError(
                    f"{key} must be a non-empty, strictly increasing list of values in [0, 1], "
                    f"got {list(grid)}"
                )
        if not self.drafters or len(set(self.drafters)) != len(self.drafters):
            raise ValueError(
                f"drafters must be a non-empty list of distinct names, got {list(self.drafters)}"
            )
        unknown = [d for d in self.drafters if d not in DRAFTERS]
        if unknown:
            raise ValueError(f"unknown drafter(s) {unknown} in drafters; choose among {list(DRAFTERS)}")
        if self.stop_grid[0] != 0.0:
            raise ValueError(f"stop_grid must start with 0 (never stop), got {list(self.stop_grid)}")
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
                f"(written by experiments/calibrate.py), got {self.latency!r}"
            )

    def latency_model(self, pair: ModelPair | PairInfo, progress: bool = True) -> LatencyModel:
        """The latency model of ``latency`` for ``pair`` (learned from the loop and cached;
        constant; or read), as the view for this scenario's sampling (greedy or sampled).
        A :class:`PairInfo` is loaded only when ``calibrated`` finds no cached model to read.

        Raises:
            ScenarioError: a latency file measured for another pair, or for fewer tokens per
                verify than this scenario's k_max + 1.
            specrl.latency.LatencyError: a latency file that is missing or invalid.
        """
        if self.latency == "constant":
            dtype = str(pair.dtype).removeprefix("torch.")
            device = device_key(pair.device)
            return LatencyModel.from_cost_model(self.cost_model, pair=pair.name, device=device, dtype=dtype)
        if self.latency == "calibrated":
            model = cached_calibration(pair, k_max=self.k_max)
            unpriced = [] if model is None else model.unpriced(self.drafters)
            if model is None or unpriced:  # measured once, then cached
                what = "its latency model" if model is None else f"the drafters {unpriced}"
                why = f"calibrate {what} (not in {specrl.latency.latency_path(pair)})"
                model = specrl.latency.calibrated(
                    loaded_pair(pair, why), k_max=self.k_max, progress=progress, drafters=self.drafters
                )
            return model.for_sampling(self.sampling)
        model = LatencyModel.load(self.latency).for_sampling(self.sampling)
        unpriced = model.unpriced(self.drafters)
        if unpriced:
            raise ScenarioError(
                f"{self._origin()}: latency file '{self.latency}' prices no step of the drafters "
                f"{unpriced}; set latency: calibrated (it measures them), or add their prices to the file"
            )
        if model.pair != pair.name:
            raise ScenarioError(
                f"{self._origin()}: latency file '{self.latency}' was measured for pair "
                f"'{model.pair}', not '{pair.name}'; calibrate this pair (experiments/"
                "calibrate.py) or set latency: calibrated"
            )
        if model.kind != "constant" and model.n_max < self.k_max + 1:
            raise ScenarioError(
                f"{self._origin()}: latency file '{self.latency}' covers verifies of up to "
                f"{model.n_max} tokens but k_max = {self.k_max} needs {self.k_max + 1}; "
                f"re-run experiments/calibrate.py with --k-max {self.k_max}"
            )
        return model

    def reference_throughput(self, latency: LatencyModel | None) -> float:
        """rho of the reward (tokens/s): ``reward.reference_tokens_per_s``, else the latency
        model's plain-decoding throughput under this scenario's sampling (then ``latency`` is
        required)."""
        if self.reward.reference_tokens_per_s is not None:
            return self.reward.reference_tokens_per_s
        if latency is None:
            raise ValueError(
                "reward.reference_tokens_per_s is null, so rho comes from the latency model: pass one"
            )
        return latency.for_sampling(self.sampling).plain_tokens_per_s

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

    def prompt_sets(self, pair: ModelPair) -> dict[str, list[str]]:
        """Domain -> prompt texts of this scenario's split, from ``prompts.file`` or the pair."""
        where = f"prompts file '{self.prompts.file}'" if self.prompts.file else f"pair '{pair.name}'"
        if self.prompts.file:
            path = Path(self.prompts.file)
            if not path.is_file():
                raise ScenarioError(
                    f"{self._origin()}: prompts.file '{path}' does not exist; give a JSON or "
                    "YAML file {split: {domain: [text, ...]}}"
                )
            sets = yaml.safe_load(path.read_text())  # JSON is YAML
        else:
            sets = pair.prompts
            if not sets:
                raise ScenarioError(
                    f"{self._origin()}: the {where} has no prompt sets (only the embedded pairs ship "
                    "them); set prompts.file to a JSON file {split: {domain: [text, ...]}}"
                )
        split = self.prompts.split
        if not isinstance(sets, Mapping) or not isinstance(sets.get(split), Mapping):
            splits = (*SPLITS, *RETIRED_SPLITS)
            available = sorted(k for k in sets if k in splits) if isinstance(sets, Mapping) else []
            hint = (
                "; its 'heldout' prompts predate the validation/test splits: divide them into "
                "'validation' and 'test' keys (specrl.zoo.corpus.split_evaluation does it the zoo's way)"
                if "heldout" in available
                else ""
            )
            raise ScenarioError(
                f"{self._origin()}: the {where} has no '{split}' prompts (it has {available}){hint}"
            )
        result = {}
        for domain in self.domains:
            texts = sets[split].get(domain)
            if not texts or not all(isinstance(t, str) and t for t in texts):
                raise ScenarioError(
                    f"{self._origin()}: the {where} has no '{split}' prompts of domain '{domain}' (domains: "
                    f"{sorted(sets[split])}); use one of those in prompts.domains / shift"
                )
            result[domain] = list(texts)
        return result

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def _origin(self) -> str:
        return self.source or f"scenario '{self.name}'"

    @classmethod
    def from_dict(cls, data: Any, source: str = "<dict>", base_dir: Path | None = None) -> Scenario:
        """Build and validate a scenario from plain data (the contents of a YAML file)."""
        try:
            return _parse(data, source, base_dir or Path.cwd())
        except ScenarioError:
            raise
        except ValueError as error:  # raised by a dataclass's own validation
            raise ScenarioError(f"{source}: {error}") from None


def shipped_scenarios() -> list[str]:
    """Names of the scenario files shipped in the package (``specrl/scenarios/``)."""
    return sorted(p.stem for p in SCENARIO_DIR.glob("*.yaml"))


def scenario_path(name: str | Path) -> Path:
    """A scenario file: a path (relative to the working directory), or the name of a shipped
    scenario ("code" -> specrl/scenarios/code.yaml, from any working directory). The path a
    shipped scenario had in the repository before it became package data ("envs/code.yaml")
    still names it when no such file exists."""
    path = Path(name).expanduser()
    candidates = [path]
    if not path.is_absolute():
        if not path.suffix and len(path.parts) == 1:
            candidates.append(SCENARIO_DIR / f"{path}.yaml")
        if len(path.parts) == 2 and path.parts[0] == LEGACY_SCENARIO_FOLDER:
            candidates.append(SCENARIO_DIR / path.name)
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise ScenarioError(
        f"scenario file '{name}' not found (looked at {', '.join(str(c) for c in candidates)}); give the "
        f"path of a YAML file or the name of a shipped scenario: {', '.join(shipped_scenarios()) or 'none'}"
    )


def load_scenario(name: str | Path) -> Scenario:
    """Read and validate a scenario YAML file (a path, or a shipped name such as "code")."""
    path = scenario_path(name)
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ScenarioError(f"{path}: not valid YAML: {error}") from None
    if data is None:
        data = {}
    if isinstance(data, Mapping) and "name" not in data:
        data = {"name": path.stem, **data}
    return Scenario.from_dict(data, source=str(path), base_dir=path.parent)


def defaults_yaml() -> str:
    """Every key of a scenario file with its default, as YAML, generated from the dataclasses
    (the one place defaults live); :meth:`Scenario.from_dict` of it gives ``Scenario()``."""
    data = asdict(Scenario())
    del data["source"]  # where a scenario was loaded from, not a key of the file
    data = json.loads(json.dumps(data))  # tuples become lists, which safe_dump writes
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None)


# ---- parsing plain data into the dataclasses, with errors that name the key -------------


def _mapping(data: Any, cls: type, key: str, source: str) -> dict[str, Any]:
    """``data`` as a dict whose keys are fields of ``cls``; otherwise a ScenarioError."""
    where = f"'{key}'" if key else "the top level"
    if not isinstance(data, Mapping):
        raise ScenarioError(f"{source}: {where} must be a mapping of keys to values, got {data!r}")
    known = [f.name for f in fields(cls) if f.name != "source"]
    for name in data:
        if name not in known:
            close = difflib.get_close_matches(str(name), known, n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise ScenarioError(
                f"{source}: unknown key '{key + '.' if key else ''}{name}' in {where}.{hint} "
                f"Known keys: {', '.join(known)}"
            )
    return dict(data)


def _typed(value: Any, kind: type, key: str, source: str, optional: bool = False) -> Any:
    """Check one leaf value; ints are accepted where floats are expected."""
    if value is None and optional:
        return None
    ok = isinstance(value, kind) and not (isinstance(value, bool) and kind is not bool)
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value, ok = float(value), True
    if kind is float and ok and not math.isfinite(value):
        ok = False
    if not ok:
        expected = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}[kind]
        expected += " or null" if optional else ""
        raise ScenarioError(f"{source}: '{key}' must be {expected}, got {value!r}")
    return value


def _leaves(data: dict[str, Any], cls: type, prefix: str, source: str) -> dict[str, Any]:
    """Type-check the scalar fields of a flat section against the dataclass annotations
    (strings such as "float" or "str | None", since the modules use postponed annotations)."""
    kinds = {"int": int, "float": float, "str": str, "bool": bool}
    out = {}
    for f in fields(cls):
        if f.name not in data:
            continue
        annotation = str(f.type).replace(" ", "")
        optional = annotation.endswith("|None")
        out[f.name] = _typed(
            data[f.name], kinds[annotation.removesuffix("|None")], prefix + f.name, source, optional
        )
    return out


def _parse(data: Any, source: str, base_dir: Path) -> Scenario:
    top = _mapping(data, Scenario, "", source)
    kwargs: dict[str, Any] = {}
    for key in ("name", "description"):
        if key in top:
            kwargs[key] = _typed(top[key], str, key, source)
    for key in ("max_new_tokens", "k_max"):
        if key in top:
            kwargs[key] = _typed(top[key], int, key, source)
    if "stop_at_eos" in top:
        kwargs["stop_at_eos"] = _typed(top["stop_at_eos"], bool, "stop_at_eos", source)
    if "pair" in top:
        section = _mapping(top["pair"], PairSpec, "pair", source)
        kwargs["pair"] = PairSpec(**_leaves(section, PairSpec, "pair.", source))
    if "prompts" in top:
        section = _mapping(top["prompts"], PromptSpec, "prompts", source)
        prompts: dict[str, Any] = {}
        if "split" in section:
            prompts["split"] = _typed(section["split"], str, "prompts.split", source)
        if section.get("file") is not None:
            prompts["file"] = str(base_dir / _typed(section["file"], str, "prompts.file", source))
        if "domains" in section:
            domains = section["domains"]
            if not isinstance(domains, Mapping):
                raise ScenarioError(
                    f"{source}: 'prompts.domains' must map domain names to weights, "
                    f"e.g. {{code: 1.0}}, got {domains!r}"
                )
            prompts["domains"] = {
                str(d): _typed(w, float, f"prompts.domains.{d}", source) for d, w in domains.items()
            }
        kwargs["prompts"] = PromptSpec(**prompts)
    if "sampling" in top:
        section = _mapping(top["sampling"], SamplingConfig, "sampling", source)
        kwargs["sampling"] = SamplingConfig(**_leaves(section, SamplingConfig, "sampling.", source))
    for key in ("tau_grid", "stop_grid"):
        if key in top:
            grid = top[key]
            if not isinstance(grid, list):
                raise ScenarioError(f"{source}: '{key}' must be a list of numbers in [0, 1], got {grid!r}")
            kwargs[key] = tuple(_typed(v, float, f"{key}[]", source) for v in grid)
    if "drafters" in top:
        names = top["drafters"]
        if not isinstance(names, list):
            raise ScenarioError(
                f"{source}: 'drafters' must be a list of names like [draft, ngram], got {names!r}"
            )
        kwargs["drafters"] = tuple(_typed(v, str, "drafters[]", source) for v in names)
    if "reward" in top:
        section = _mapping(top["reward"], RewardSpec, "reward", source)
        kwargs["reward"] = RewardSpec(**_leaves(section, RewardSpec, "reward.", source))
    if "latency" in top:
        latency = _typed(top["latency"], str, "latency", source)
        if latency not in LATENCY_SOURCES:  # a file, relative to the scenario's folder
            latency = str(base_dir / Path(latency).expanduser())
        kwargs["latency"] = latency
    if "cost_model" in top:
        section = _mapping(top["cost_model"], CostModel, "cost_model", source)
        kwargs["cost_model"] = CostModel(**_leaves(section, CostModel, "cost_model.", source))
    if "shift" in top:
        shifts = top["shift"] or []
        if not isinstance(shifts, list):
            raise ScenarioError(
                f"{source}: 'shift' must be a list like [{{after_tokens: 64, domain: math}}], got {shifts!r}"
            )
        parsed = []
        for i, item in enumerate(shifts):
            section = _mapping(item, DomainShift, f"shift[{i}]", source)
            missing = [f.name for f in fields(DomainShift) if f.name not in section]
            if missing:
                raise ScenarioError(
                    f"{source}: 'shift[{i}]' is missing {missing}; write e.g. "
                    "{after_tokens: 64, domain: math}"
                )
            parsed.append(DomainShift(**_leaves(section, DomainShift, f"shift[{i}].", source)))
        kwargs["shift"] = tuple(parsed)
    if "batch" in top:
        section = _mapping(top["batch"], BatchSpec, "batch", source)
        batch: dict[str, Any] = {}
        for key in ("size", "max_size", "requests"):
            if key in section:
                batch[key] = _typed(section[key], int, f"batch.{key}", source)
        if "load" in section:
            phases = section["load"] or []
            if not isinstance(phases, list) or not all(isinstance(p, list) and len(p) == 2 for p in phases):
                raise ScenarioError(
                    f"{source}: 'batch.load' must be a list of [seconds, requests_per_second] phases, "
                    f"e.g. [[60, 0.2], [60, 1.5]], got {phases!r}"
                )
            batch["load"] = tuple(
                (_typed(t, float, "batch.load[][0]", source), _typed(r, float, "batch.load[][1]", source))
                for t, r in phases
            )
        kwargs["batch"] = BatchSpec(**batch)
    return Scenario(**kwargs, source=source)
