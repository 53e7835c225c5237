"""Build an embedded (target, draft) pair from scratch, offline, deterministically for a seed.

Layout of a built pair (what ``specrl.load_pair`` reads)::

    <pair dir>/
      target/        save_pretrained: config, safetensors weights, tokenizer, generation config
      draft/         the same for the distilled draft
      prompts.json   {"train": {domain: [prompt, ...]}, "validation": {...}, "test": {...},
                      "sources": {domain: where its text comes from}} (specrl.zoo.corpus)
      card.json      preset, seed, sizes, held-out loss per domain, draft/target agreement

The directory appears atomically: it is built under a temporary name and renamed.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

from specrl.zoo.corpus import DOMAINS, build_corpus
from specrl.zoo.presets import PRESETS
from specrl.zoo.train import encode_streams, evaluate, make_model, train, train_tokenizer

CARD = "card.json"
PROMPTS = "prompts.json"


def specrl_home() -> Path:
    """``$SPECRL_HOME``, else ``$XDG_CACHE_HOME/specrl``, else ``~/.cache/specrl``."""
    if os.environ.get("SPECRL_HOME"):
        return Path(os.environ["SPECRL_HOME"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "specrl"


def shipped_dir(preset: str) -> Path:
    """Where pre-built weights of a preset live inside the installed package."""
    return Path(__file__).parent / "weights" / preset


def cached_dir(preset: str, seed: int) -> Path:
    return specrl_home() / "zoo" / f"{preset}-seed{seed}"


def is_complete(pair_dir: Path) -> bool:
    return (pair_dir / CARD).is_file() and (pair_dir / "target").is_dir() and (pair_dir / "draft").is_dir()


def ensure_pair(preset: str = "small", seed: int = 0) -> Path:
    """The directory of a built pair: shipped weights if the package has them, else the
    cache, else build it now (with progress) into the cache."""
    if preset not in PRESETS:
        raise ValueError(f"unknown zoo preset {preset!r}; choose one of {sorted(PRESETS)}")
    if seed == 0 and is_complete(shipped_dir(preset)):
        return shipped_dir(preset)
    target_dir = cached_dir(preset, seed)
    if not is_complete(target_dir):
        print(
            f"specrl: building the embedded '{preset}' pair into {target_dir} (first use only)",
            file=sys.stderr,
        )
        build(preset, seed, target_dir)
    return target_dir


def build(
    preset_name: str,
    seed: int,
    out_dir: Path,
    save_dtype: torch.dtype | None = None,
    device: str | None = None,
    command: str | None = None,
) -> Path:
    """Build corpus, tokenizer, target and distilled draft; write them atomically to out_dir.

    Args:
        preset_name: a key of ``PRESETS``.
        seed: decides the corpus split of math, prompt cuts, initialisation and batches.
        out_dir: final directory; replaced only when the build has fully succeeded.
        save_dtype: weights dtype on disk (e.g. ``torch.float16`` for shipped weights).
        device: training device; default CUDA if available.
        command: the command line recorded in the model card.
    """
    preset = PRESETS[preset_name]
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    train_device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    started = time.time()

    corpus = build_corpus(seed, preset.max_files, preset.prompts_per_domain, preset.heldout_percent)
    train_texts = [t for d in DOMAINS for t in corpus.text["train"][d]]
    tokenizer = train_tokenizer(iter(train_texts), preset.vocab_size)
    train_streams = encode_streams(tokenizer, corpus.text["train"])
    heldout_streams = encode_streams(tokenizer, corpus.text["heldout"])

    target = make_model(preset.target, preset, tokenizer, seed).to(train_device)
    target_losses = train(target, train_streams, preset, seed, desc=f"{preset_name} target")
    draft = make_model(preset.draft, preset, tokenizer, seed + 1).to(train_device)
    draft_losses = train(
        draft, train_streams, preset, seed + 1, teacher=target, desc=f"{preset_name} draft (distil)"
    )
    quality = evaluate(target, draft, heldout_streams, preset)

    card = {
        "preset": preset.to_dict(),
        "seed": seed,
        "command": command or f"python -m specrl.zoo build --preset {preset_name} --seed {seed}",
        "built_with": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "device": str(train_device),
            "machine": f"{platform.machine()} {os.cpu_count()} cpus",
            "seconds": round(time.time() - started, 1),
        },
        "corpus": corpus.source,
        "tokens": {
            split: {d: int(len(s[d])) for d in DOMAINS}
            for split, s in (("train", train_streams), ("heldout", heldout_streams))
        },
        "parameters": {"target": target.num_parameters(), "draft": draft.num_parameters()},
        "final_train_loss": {
            "target": round(sum(target_losses[-20:]) / 20, 4),
            "draft": round(sum(draft_losses[-20:]) / 20, 4),
        },
        "heldout": quality,
        "draft_trained_on": [d for d, w in zip(DOMAINS, preset.mix_draft, strict=True) if w > 0],
    }

    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, model in (("target", target), ("draft", draft)):
            model = model.to("cpu")
            if save_dtype is not None:
                model = model.to(save_dtype)
            model.save_pretrained(tmp / name)
            tokenizer.save_pretrained(tmp / name)
        (tmp / PROMPTS).write_text(json.dumps({**corpus.prompts, "sources": corpus.sources}, indent=1))
        (tmp / CARD).write_text(json.dumps(card, indent=2))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir
