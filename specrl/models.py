"""Load a (target, draft) pair: a Hugging Face id or a local path for each, or the embedded one."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    DynamicCache,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    cache_utils,
)

# registers the sub-vocabulary draft with transformers' Auto classes, so its folders load by path
from specrl.pretrained.chat import chat_text
from specrl.pretrained.subvocab import SubVocabLlamaForCausalLM

EMBEDDED_PREFIX = "specrl-zoo-"  # an embedded pair's name: specrl-zoo-<preset>
# Cache layers that crop back exactly: the dynamic layer, and the dummy layer of a block without
# attention; layers of recurrent state (linear attention) do not. transformers 5.19 (vLLM's) has no
# dummy layer.
_CROPPABLE = tuple(
    getattr(cache_utils, name) for name in ("DynamicLayer", "DummyLayer") if hasattr(cache_utils, name)
)
_RECURRENT = tuple(
    getattr(cache_utils, name) for name in ("LinearAttentionCacheLayerMixin",) if hasattr(cache_utils, name)
)


class PairError(ValueError):
    """The two models cannot be used together (or one cannot be found)."""


class UnsupportedArchitectureError(PairError):
    """A model whose KV cache specrl cannot cut back after a rejection."""


def check_cache(cache, config) -> None:
    """Refuse a cache with a layer that ``crop`` cannot put back exactly (recurrent state: Mamba or
    linear-attention layers cannot be rewound without a recompute), naming the architecture."""
    bad = sorted(
        {
            type(layer).__name__
            for layer in cache.layers
            if isinstance(layer, _RECURRENT) or not isinstance(layer, _CROPPABLE)
        }
    )
    if bad:
        model_type = getattr(config, "model_type", None) or type(config).__name__
        raise UnsupportedArchitectureError(
            f"architecture '{model_type}' is not supported: its KV cache has {', '.join(bad)} layers "
            "(recurrent / linear-attention state), which cannot be rolled back to an earlier "
            "position after a rejected draft without recomputing the prefix. specrl supports "
            "full-attention and sliding-window transformer caches."
        )


def check_architecture(model: PreTrainedModel, role: str) -> None:
    """Refuse, at load time, a model that speculative decoding with rollback cannot drive."""
    model_type = model.config.model_type
    try:
        cache = DynamicCache(config=model.config)
    except Exception as error:  # noqa: BLE001 - any failure means no cache we can drive
        raise UnsupportedArchitectureError(
            f"the {role} model's architecture '{model_type}' has no dynamic KV cache specrl can "
            f"drive: {error}"
        ) from error
    try:
        check_cache(cache, model.config)
    except UnsupportedArchitectureError as error:
        raise UnsupportedArchitectureError(f"the {role} model: {error}") from None


KV_CACHES = ("dynamic", "static")


@dataclass(frozen=True)
class CacheSettings:
    """How a generation keeps its KV caches (:class:`specrl.engine.cache.KVCache`): ``kind``
    ``dynamic`` (transformers' ``DynamicCache``) or ``static`` (``StaticCache``, allocated once; what
    ``torch.compile`` needs); ``compile``: run the decode forwards through ``torch.compile``."""

    kind: str = "dynamic"
    compile: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KV_CACHES:
            raise ValueError(f"unknown KV cache {self.kind!r}; choose one of {', '.join(KV_CACHES)}")
        if self.compile and self.kind != "static":
            raise ValueError(
                "compile=True needs kv_cache='static': a dynamic cache changes shape every step, "
                "so a compiled forward would recompile every step"
            )


@dataclass
class ModelPair:
    """A target and a draft that share a tokenizer, on one device.

    Attributes:
        vocab_size: the shared vocabulary; logits rows beyond it (embedding padding) are dropped.
        context_length: the smaller of the two models' context windows.
        prompts: split -> domain -> prompt texts, for the embedded pairs; card: their model card.
        mid: a second draft of another size (``draft-mid``, the cascade's upper stage), or None.
        derived: models derived from these on first use and kept for the pair's life (the
            quantised drafts: drafter name -> (the draft it was made from, copy)).
    """

    target: PreTrainedModel
    draft: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    device: torch.device
    dtype: torch.dtype
    name: str
    vocab_size: int
    context_length: int
    eos_token_id: int | None
    prompts: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    card: dict | None = None
    mid: PreTrainedModel | None = None
    derived: dict[str, tuple] = field(default_factory=dict, repr=False, compare=False)
    cache: CacheSettings = field(default_factory=CacheSettings)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def chat(self, message: str) -> str:
        """The user ``message`` through the tokenizer's chat template, up to the assistant's turn."""
        return chat_text(self.tokenizer, message)


def check_device(device: torch.device) -> None:
    """Refuse a CUDA device where torch has none, saying why and what to do."""
    if device.type == "cuda" and not torch.cuda.is_available():
        build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
        raise PairError(
            f"device {str(device)!r} was asked for, but torch {torch.__version__} ({build}) sees no CUDA "
            "device here; install a CUDA build of torch on a machine with a GPU, or pass device='cpu'"
        )


def placement(
    device: str | torch.device | None, dtype: torch.dtype | str | None
) -> tuple[torch.device, torch.dtype]:
    """The device (checked) and dtype asked for, each defaulted for the machine."""
    device = torch.device(device) if device is not None else default_device()
    check_device(device)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    return device, dtype or default_dtype(device)


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on GPU, fp32 on CPU (CPU bf16 matmuls are slower than fp32 at batch 1)."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def _looks_like_path(name: str) -> bool:
    return name.startswith((".", "/", "~")) or Path(name).expanduser().exists() or "\\" in name


def _check_source(name: str, role: str) -> str:
    if _looks_like_path(name):
        path = Path(name).expanduser()
        if not path.exists():
            raise FileNotFoundError(
                f"{role} model path '{name}' does not exist; pass a Hugging Face model id or a "
                f"local directory written by save_pretrained (with config.json)"
            )
        if not (path / "config.json").is_file():
            raise FileNotFoundError(
                f"{role} model path '{name}' has no config.json; it must be a directory "
                f"written by save_pretrained"
            )
        return str(path)
    return name


@contextmanager
def no_progress_bars() -> Iterator[None]:
    """transformers' weight-loading bars off inside the block (as they were after it)."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _load(name: str, role: str, device: torch.device, dtype: torch.dtype, trust_remote_code: bool):
    source = _check_source(name, role)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust_remote_code)
        with no_progress_bars():  # seconds of work: no bar
            model = AutoModelForCausalLM.from_pretrained(
                source, dtype=dtype, trust_remote_code=trust_remote_code
            )
    except OSError as error:
        raise PairError(
            f"could not load the {role} model '{name}': {error}\nIf the Hub is unreachable, "
            f"pass a local directory, or call specrl.load_pair() for the embedded pair."
        ) from error
    return tokenizer, model.to(device).eval()


def check_tokenizers(
    target_tok: PreTrainedTokenizerBase, draft_tok: PreTrainedTokenizerBase, target_name: str, draft_name: str
) -> None:
    """Refuse a pair whose tokenizers map text to different ids; say how they differ."""
    target_vocab, draft_vocab = target_tok.get_vocab(), draft_tok.get_vocab()
    if target_vocab != draft_vocab:
        only_target = sorted(set(target_vocab) - set(draft_vocab))[:5]
        only_draft = sorted(set(draft_vocab) - set(target_vocab))[:5]
        moved = [t for t in target_vocab if t in draft_vocab and target_vocab[t] != draft_vocab[t]]
        raise PairError(
            "the target and draft tokenizers differ, so draft tokens cannot be verified: "
            f"target '{target_name}' has {len(target_vocab)} tokens, draft '{draft_name}' has "
            f"{len(draft_vocab)}; only in target: {only_target}, only in draft: {only_draft}, "
            f"{len(moved)} tokens with different ids (e.g. {moved[:3]}). Use a draft trained "
            "with the target's tokenizer."
        )
    probe = "def f(x):\n    return x + 1  # héllo"
    if target_tok.encode(probe) != draft_tok.encode(probe):
        raise PairError(
            f"the tokenizers of '{target_name}' and '{draft_name}' share a vocabulary but "
            "encode text differently (normaliser, pre-tokeniser or special tokens differ)"
        )


def output_rows(model: PreTrainedModel) -> int:
    """The rows of the model's logits (its vocabulary, padding included): its output layer's,
    or the whole vocabulary for a draft whose head covers part of it (:mod:`specrl.pretrained.subvocab`)."""
    if isinstance(model, SubVocabLlamaForCausalLM):
        return int(model.config.vocab_size)
    head = model.get_output_embeddings()
    if head is not None and getattr(head, "weight", None) is not None:
        return int(head.weight.shape[0])
    return int(model.config.get_text_config().vocab_size)


def check_output_rows(model: PreTrainedModel, vocab_size: int, role: str) -> None:
    """Refuse a model with fewer output rows than its tokenizer has tokens."""
    rows = output_rows(model)
    if rows < vocab_size:
        raise PairError(
            f"the {role} model has {rows} output rows but its tokenizer has "
            f"{vocab_size} tokens; the checkpoint does not match its tokenizer"
        )


def load_draft(
    draft: str,
    target: str,
    *,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, int]:
    """A draft model for a target another engine runs (vLLM), checked against ``target``'s tokenizer
    (the only part of the target loaded). Returns the model and the shared vocabulary's size."""
    device, dtype = placement(device, dtype)
    try:
        target_tok = AutoTokenizer.from_pretrained(
            _check_source(target, "target"), trust_remote_code=trust_remote_code
        )
    except OSError as error:
        raise PairError(f"could not load the tokenizer of the target '{target}': {error}") from error
    draft_tok, model = _load(draft, "draft", device, dtype, trust_remote_code)
    check_tokenizers(target_tok, draft_tok, target, draft)
    check_architecture(model, "draft")
    check_output_rows(model, len(target_tok), "draft")
    return model, len(target_tok)


def target_folders(pair_name: str) -> set[str]:
    """Where the target of the pair named ``pair_name`` may live, resolved: a preset's target
    folders (an embedded pair's shipped and cached ones, a pretrained pair's fetched one), else the
    part of ``target+draft`` before the ``+`` (what a host that knows only the model it serves
    compares a policy's pair with)."""
    if pair_name.startswith(EMBEDDED_PREFIX):
        from specrl.pretrained import target_dirs

        folders = target_dirs(pair_name.removeprefix(EMBEDDED_PREFIX))
    else:
        folders = [Path(pair_name.split("+", 1)[0])]
    return {str(folder.resolve()) if folder.exists() else str(folder) for folder in folders}


def served_target(target: str | Path) -> str:
    """``target`` (a served model's HF id or folder) as :func:`target_folders` spells it."""
    path = Path(target)
    return str(path.resolve()) if path.exists() else str(target)


def load_pair(
    target: str | None = None,
    draft: str | None = None,
    *,
    preset: str | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | str | None = None,
    trust_remote_code: bool = False,
    seed: int = 0,
    mid: str | None = None,
    kv_cache: str = "dynamic",
    compile: bool = False,
) -> ModelPair:
    """Load a target and a draft model that share a tokenizer.

    Args:
        target, draft: HF ids or local paths; both, or neither (an embedded pair).
        preset: an embedded pair ("small", the default, or "tiny" for tests), built on first
            use if its weights are neither shipped nor cached; or a pretrained pair ("smollm2":
            SmolLM2-135M-Instruct), fetched once with ``specrl fetch smollm2`` and checked by
            checksum at every load.
        device: default CUDA when present, else CPU; dtype: default bf16 on GPU, fp32 on CPU.
        trust_remote_code: passed to ``from_pretrained``; never set unless you ask.
        seed: seed of an embedded pair's build.
        mid: HF id or local path of a second draft of another size (``draft-mid``); an embedded
            pair loads its own when it has one.
        kv_cache, compile: :class:`CacheSettings`.
    """
    if (target is None) != (draft is None):
        raise PairError("give both target and draft, or neither (for the embedded pair)")
    if target is not None and preset is not None:
        raise PairError("give either target/draft or preset, not both")
    cache = CacheSettings(kv_cache, compile)
    device, dtype = placement(device, dtype)

    prompts: dict = {}
    card = None
    if target is None:
        from specrl.pretrained import NotFetchedError, pair_folder

        preset = preset or "small"
        try:
            pair_dir = pair_folder(preset, seed)
        except NotFetchedError as error:
            raise PairError(str(error)) from None
        target, draft = str(pair_dir / "target"), str(pair_dir / "draft")
        if mid is None and (pair_dir / "draft-mid").is_dir():
            mid = str(pair_dir / "draft-mid")
        if (pair_dir / "prompts.json").is_file():  # a pretrained pair takes the user's prompt files
            prompts = json.loads((pair_dir / "prompts.json").read_text())
        card = json.loads((pair_dir / "card.json").read_text())
        name = f"{EMBEDDED_PREFIX}{preset}"
    else:
        name = f"{target}+{draft}"
    assert draft is not None
    target_tok, target_model = _load(target, "target", device, dtype, trust_remote_code)
    draft_tok, draft_model = _load(draft, "draft", device, dtype, trust_remote_code)
    check_tokenizers(target_tok, draft_tok, target, draft)
    check_architecture(target_model, "target")
    check_architecture(draft_model, "draft")
    models = {"target": target_model, "draft": draft_model}
    if mid is not None:
        mid_tok, models["mid"] = _load(mid, "mid draft", device, dtype, trust_remote_code)
        check_tokenizers(target_tok, mid_tok, target, mid)
        check_architecture(models["mid"], "mid draft")

    vocab_size = len(target_tok)
    for role, model in models.items():
        check_output_rows(model, vocab_size, role)
    context = min(getattr(m.config, "max_position_embeddings", None) or 2**31 for m in models.values())
    return ModelPair(
        target=target_model,
        draft=draft_model,
        tokenizer=target_tok,
        device=device,
        dtype=dtype,
        name=name,
        vocab_size=vocab_size,
        context_length=context,
        eos_token_id=target_tok.eos_token_id,
        prompts=prompts,
        card=card,
        mid=models.get("mid"),
        cache=cache,
    )
