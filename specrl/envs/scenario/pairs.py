"""The scenario's pair: which (target, draft) pair it names, and that pair before it is loaded.

:class:`PairSpec` is the ``pair:`` section; :class:`PairInfo` is what the trace and latency caches
key on (name, device, dtype), so a simulator finds shipped or cached data without loading a model.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field

import torch

from specrl.models import (
    EMBEDDED_PREFIX,
    CacheSettings,
    ModelPair,
    default_device,
    default_dtype,
    load_pair,
)


@dataclass(frozen=True)
class PairSpec:
    """Which (target, draft) pair to load: an embedded preset, or a target and a draft.

    Attributes:
        preset: embedded pair ("small", "tiny"; the default when no target/draft is given) or
            pretrained pair ("smollm2", fetched once with ``specrl fetch smollm2``).
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
            name = f"{EMBEDDED_PREFIX}{self.preset or 'small'}"
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
        """A preset pair's prompt sets (read from its folder, no weights loaded); else none."""
        if self.spec.target is not None:
            return {}
        from specrl.pretrained import pair_folder

        prompts = pair_folder(self.spec.preset or "small", self.spec.seed) / "prompts.json"
        return json.loads(prompts.read_text()) if prompts.is_file() else {}

    def load(self, why: str) -> ModelPair:
        """The loaded pair (loaded once, with a line on stderr that says ``why``)."""
        if self._loaded is None:
            print(f"specrl: loading the model pair {self.name} to {why}", file=sys.stderr)
            self._loaded = self.spec.load()
        return self._loaded


def loaded_pair(pair: ModelPair | PairInfo, why: str) -> ModelPair:
    """``pair`` itself when loaded, else :meth:`PairInfo.load` (saying ``why``)."""
    return pair.load(why) if isinstance(pair, PairInfo) else pair
