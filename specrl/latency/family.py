"""A family of machines: the latency models a portable policy trains over (docs/design.md,
"Machines"): the shipped calibrations (``profiles/*.json``; over batch sizes ``profiles/batch/``),
GPU-like profiles (:class:`GpuLike`), and perturbations of each (:func:`perturbed`), drawn once
so that each model keeps its caches across episodes. :data:`HELD_OUT` names the profiles no
shipped policy trains on.

The GPU-like numbers (:data:`GPU_LIKE`) model machines; a GPU's own calibration replaces them:

- the knee (tokens per forward where a forward turns compute-bound) is about half the roofline's
  bf16 FLOPs over memory bandwidth (A100 SXM 156 tokens, H100 SXM 295, H200 206, L4 403: NVIDIA's
  data sheets);
- two tokens instead of one cost a step (``jump``: matrix-matrix kernels): llama.cpp issue 3649
  (7B f16 on a V100: 32.6 ms for one token, 39 ms for two or three), Medusa (Cai et al. 2024,
  Table 1: 1.18-1.27x); above it, a few percent up to the knee (``below``);
- the draft at 2-11% of a target forward: Leviathan et al. (2023, Table 4: c = 0.02-0.11 for
  T5 drafts of T5-XXL); an EAGLE head is 1.4-3.4% of its target (Li et al. 2024, section 4).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

import numpy as np

from specrl.latency.batch import DEFAULT_BATCH_SIZES
from specrl.latency.cost_model import CONSTANT_DRAFTER_COSTS
from specrl.latency.drafters import with_drafter_costs
from specrl.latency.fileformat import COST_KEYS, LatencyError
from specrl.latency.model import LatencyModel

PROFILES_DIR = Path(__file__).parent / "profiles"
BATCH_PROFILES_DIR = PROFILES_DIR / "batch"  # calibrations over batch sizes (method "batch")
GPU_CONTEXTS = (64, 256, 512, 1024)
SPREAD = 0.25  # sigma of the log-normal perturbations
PERTURBATIONS = 6  # perturbed models per profile, besides the profile itself
STEP_HEIGHTS = (0.05, 0.35)  # a perturbation's step, as a share of a one-token verification: uniform
FAMILY_SEED = 0


@dataclasses.dataclass(frozen=True)
class GpuLike:
    """A GPU-like machine (the module doc).

    A target forward of B rows fed n tokens a row, after a context of c tokens, costs
    ``target_ms * growth(B n) * (1 + kv * B * c / 1024)``, with ``growth(T) = 1 + jump [T > 1] +
    below * T / knee`` up to the knee and ``growth(knee) * T / knee`` beyond it; a draft forward
    ``draft_ratio`` times a one-token target forward of one row, times ``growth(B) / growth(1)``.
    Admitting m prompts of p tokens into B rows costs a forward over the m p tokens, ``c0 + c1 m p``
    (a forward's cost at the knee, and linear beyond it), plus ``c3 (B + m) context``, the cache's
    reads (:mod:`specrl.latency.model`'s prefill terms).
    """

    name: str
    target_ms: float  # one row, one token: sets the machine's speed (prices do not depend on it)
    knee: int  # tokens per forward
    jump: float  # two tokens instead of one: matrix-matrix kernels
    below: float  # growth from no tokens to the knee
    draft_ratio: float
    kv: float = 0.01  # reading the KV cache: relative cost per row per 1,024 tokens of context

    def growth(self, tokens):
        """A target forward fed ``tokens`` tokens over one fed a single token, at no context."""
        tokens = np.asarray(tokens)
        below = 1 + self.jump * (tokens > 1) + self.below * np.minimum(tokens, self.knee) / self.knee
        return below * np.maximum(1.0, tokens / self.knee)

    def model(
        self,
        n_max: int = 9,
        batch_sizes: Sequence[int] = (1,),
        contexts: Sequence[int] = GPU_CONTEXTS,
    ) -> LatencyModel:
        """The latency model of this machine, on a grid of batch sizes and contexts, n = 1..n_max."""
        sizes = np.asarray(batch_sizes, dtype=np.float64)[:, None, None]
        tokens = np.arange(1, n_max + 1, dtype=np.float64)[None, :, None] * sizes
        attention = 1 + self.kv * sizes * np.asarray(contexts, dtype=np.float64)[None, None, :] / 1024
        target = 1e-3 * self.target_ms * self.growth(tokens) * attention
        draft = self.draft_ratio * 1e-3 * self.target_ms * self.growth(sizes[:, 0, :]) / self.growth(1.0)
        draft = np.broadcast_to(draft, (len(batch_sizes), len(contexts)))
        forward = 1e-3 * self.target_ms * float(self.growth(self.knee))
        return LatencyModel(
            "any",
            f"gpu-like-{self.name}",
            contexts,
            target,
            draft,
            batch_sizes=batch_sizes,
            kind="synthetic",
            prefill=(forward, forward / self.knee, 0.0, 1e-3 * self.target_ms * self.kv / 1024),
            measurement={"gpu_like": dataclasses.asdict(self), "source": "specrl.latency.family"},
            drafter_costs=CONSTANT_DRAFTER_COSTS,
        )


GPU_LIKE = (
    GpuLike("a100", target_ms=12.0, knee=80, jump=0.15, below=0.05, draft_ratio=0.04),
    GpuLike("h100", target_ms=7.0, knee=150, jump=0.10, below=0.04, draft_ratio=0.02),
    GpuLike("l4", target_ms=30.0, knee=200, jump=0.20, below=0.03, draft_ratio=0.11),
    GpuLike("a100-eagle", target_ms=12.0, knee=80, jump=0.25, below=0.08, draft_ratio=0.03),
    GpuLike("h200", target_ms=6.0, knee=100, jump=0.12, below=0.05, draft_ratio=0.05),
)
# The profiles no shipped policy trains on (docs/design.md, "Machines").
HELD_OUT = ("cpu-epyc-2t-dec", "cpu-xeon-2t", "gpu-like-h200", "cpu-epyc-2t-dec6")


def _measured(batch: bool) -> list[Path]:
    return sorted((BATCH_PROFILES_DIR if batch else PROFILES_DIR).glob("*.json"))


def with_pool_prices(model: LatencyModel) -> LatencyModel:
    """``model``, pricing every drafter of the pool: one it has not measured at
    :data:`~specrl.latency.cost_model.CONSTANT_DRAFTER_COSTS` (measured on 2 EPYC cores, Dec 1);
    ``measurement["drafter_costs_from"]`` names the drafters filled in."""
    missing = {d: cost for d, cost in CONSTANT_DRAFTER_COSTS.items() if d not in model.drafter_costs}
    if not missing:
        return model
    filled = with_drafter_costs(model, missing)
    filled.measurement["drafter_costs_from"] = {"results/drafters/drafters.md (EPYC, Dec 1)": sorted(missing)}
    return filled


def profiles(batch: bool = False) -> dict[str, LatencyModel]:
    """Every profile of the family by name, measured (the shipped calibrations, by file name) and
    GPU-like; each model's ``measurement["profile"]`` is its name. ``batch``: the models over
    batch sizes the batch simulator prices with (the measured ones of ``profiles/batch/``, the
    GPU-like ones over :data:`~specrl.latency.batch.DEFAULT_BATCH_SIZES`)."""
    models = {path.stem: with_pool_prices(LatencyModel.load(path)) for path in _measured(batch)}
    sizes = DEFAULT_BATCH_SIZES if batch else (1,)
    models.update({f"gpu-like-{gpu.name}": gpu.model(batch_sizes=sizes) for gpu in GPU_LIKE})
    for name, model in models.items():
        model.measurement["profile"] = name
    return models


def perturbed(
    model: LatencyModel, draft_factor: float, growth_factor: float, step: float = 0.0, step_at: int = 2
) -> LatencyModel:
    """``model`` with its draft forwards ``draft_factor`` times as dear, its verification's growth
    over one token ``growth_factor`` times as steep, and from ``step_at`` tokens a row on (2 to its
    ``n_max``) ``step`` times a one-token verification dearer (every batch size and context; both
    modes; scales, prefill and the other drafters' prices kept)."""
    if not (draft_factor > 0 and growth_factor > 0 and step >= 0):
        raise ValueError(
            f"the factors must be > 0 and the step >= 0, got {draft_factor}, {growth_factor}, {step}"
        )
    if step and not 2 <= step_at <= model.n_max:
        raise ValueError(f"step_at must be a token count in 2..{model.n_max}, got {step_at}")
    data = model.to_dict()
    for mode, costs in model.costs.items():
        one = costs.target[:, :1, :]
        target = np.maximum(one + growth_factor * (costs.target - one), 1e-9)
        target[:, step_at - 1 :, :] += step * one
        tables = (target, costs.draft_first * draft_factor, costs.draft_next * draft_factor)
        data[mode] = {key: table.tolist() for key, table in zip(COST_KEYS, tables, strict=True)}
    change = {"draft": draft_factor, "growth": growth_factor}
    if step:
        change.update(step=step, step_at=step_at)
    data["measurement"] = {**model.measurement, "perturbed": change}
    return LatencyModel.from_dict(data, source=f"perturbed {model.device}")


@dataclasses.dataclass(frozen=True)
class LatencyFamily:
    """Machines an episode draws its latency model from, uniformly over profiles, then uniformly
    over each profile's perturbations (the profile itself among them; every other perturbation
    has a step, at a uniform token count, of a height uniform in :data:`STEP_HEIGHTS`).

    Attributes:
        names: the profiles, in order (see :func:`profiles`).
        perturbations: perturbed models per profile besides the profile itself.
        spread: sigma of the log-normal factors of :func:`perturbed`.
        seed: the seed of the perturbations (drawn once: the family is the same everywhere).
        batch: models over batch sizes (the batch simulator's), else of one row.
    """

    names: tuple[str, ...]
    perturbations: int = PERTURBATIONS
    spread: float = SPREAD
    seed: int = FAMILY_SEED
    batch: bool = False

    def __post_init__(self) -> None:
        known = profiles_known(self.batch)
        unknown = [name for name in self.names if name not in known]
        if unknown or not self.names:
            what = "batch latency profile(s)" if self.batch else "latency profile(s)"
            raise LatencyError(f"unknown {what} {unknown or '(none given)'}; known: {known}")

    @classmethod
    def training(cls, batch: bool = False) -> LatencyFamily:
        """The family shipped policies train over: every profile but :data:`HELD_OUT`."""
        return cls(tuple(name for name in profiles_known(batch) if name not in HELD_OUT), batch=batch)

    @cached_property
    def models(self) -> tuple[tuple[LatencyModel, ...], ...]:
        """Per profile: the profile, then its perturbations."""
        everything = profiles(self.batch)
        rng = np.random.default_rng(self.seed)
        out = []
        for name in self.names:
            base = everything[name]
            factors = np.exp(rng.normal(0.0, self.spread, (self.perturbations, 2))).tolist()
            steps = rng.uniform(*STEP_HEIGHTS, self.perturbations) * (np.arange(self.perturbations) % 2)
            places = rng.integers(2, base.n_max + 1, self.perturbations)
            out.append(
                (
                    base,
                    *(
                        perturbed(base, draft, growth, float(step), int(at))
                        for (draft, growth), step, at in zip(factors, steps, places, strict=True)
                    ),
                )
            )
        return tuple(out)

    def profile(self, name: str) -> LatencyModel:
        """The unperturbed model of the family's profile ``name``."""
        if name not in self.names:
            raise LatencyError(f"latency profile {name!r} is not in this family {list(self.names)}")
        return self.models[self.names.index(name)][0]

    def draw(self, rng: np.random.Generator) -> LatencyModel:
        """One machine, with two draws from ``rng``."""
        group = self.models[int(rng.integers(len(self.models)))]
        return group[int(rng.integers(len(group)))]

    def describe(self) -> dict:
        """What a policy's metadata records as ``latency_profiles`` (``held_out``: every known
        profile it was not trained over; for the shipped family, :data:`HELD_OUT`)."""
        return {
            "profiles": list(self.names),
            "perturbations": self.perturbations,
            "spread": self.spread,
            "step_heights": list(STEP_HEIGHTS),
            "seed": self.seed,
            "held_out": [name for name in profiles_known(self.batch) if name not in self.names],
            "batch": self.batch,
        }


def profiles_known(batch: bool = False) -> list[str]:
    """The names of every profile (``batch``: of those over batch sizes), without building the
    models."""
    return [path.stem for path in _measured(batch)] + [f"gpu-like-{gpu.name}" for gpu in GPU_LIKE]
