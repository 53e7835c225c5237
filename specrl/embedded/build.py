"""Build an embedded (target, draft) pair from scratch, offline, deterministically for a seed.

Layout of a built pair (what ``specrl.load_pair`` reads)::

    <pair dir>/
      target/        save_pretrained: config, safetensors weights, tokenizer, generation config
      draft/         the same for the distilled draft
      draft-mid/     a second distilled draft of another size, when the preset has one (``mid``)
      prompts.json   {"train": {domain: [prompt, ...]}, "validation": {...}, "test": {...},
                      "sources": {domain: where its text comes from}} (specrl.embedded.corpus)
      card.json      preset, seed, sizes, held-out loss per domain, draft/target agreement

The directory appears atomically: it is built under a temporary name and renamed.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from specrl.embedded.corpus import DOMAINS, build_corpus
from specrl.embedded.presets import PRESETS, training_flops
from specrl.embedded.train import encode_streams, evaluate, make_model, train, train_tokenizer
from specrl.home import specrl_home
from specrl.provenance import machine

CARD = "card.json"
PROMPTS = "prompts.json"
MID = "draft-mid"


def shipped_dir(preset: str) -> Path:
    """Where pre-built weights of a preset live inside the installed package."""
    return Path(__file__).parent / "weights" / preset


def cached_dir(preset: str, seed: int) -> Path:
    return specrl_home() / "embedded" / f"{preset}-seed{seed}"


def is_complete(pair_dir: Path) -> bool:
    """The pair's card and both models are there (the mid draft is optional: :func:`has_mid`)."""
    return (pair_dir / CARD).is_file() and (pair_dir / "target").is_dir() and (pair_dir / "draft").is_dir()


def has_mid(pair_dir: Path) -> bool:
    return (pair_dir / MID).is_dir()


def ensure_pair(preset: str = "small", seed: int = 0) -> Path:
    """The directory of a built pair: shipped weights if the package has them, else the cache, else
    built now into the cache. A cached pair without its preset's mid draft gets one (:func:`add_mid`)."""
    if preset not in PRESETS:
        raise ValueError(f"unknown embedded-pair preset {preset!r}; choose one of {sorted(PRESETS)}")
    if seed == 0 and is_complete(shipped_dir(preset)):
        return shipped_dir(preset)
    target_dir = cached_dir(preset, seed)
    if not is_complete(target_dir):
        print(
            f"specrl: building the embedded '{preset}' pair into {target_dir} (first use only)",
            file=sys.stderr,
        )
        build(preset, seed, target_dir)
    elif PRESETS[preset].mid is not None and not has_mid(target_dir):
        print(
            f"specrl: distilling the '{preset}' pair's {MID} into {target_dir} (first use only)",
            file=sys.stderr,
        )
        add_mid(target_dir)
    return target_dir


def build(
    preset_name: str,
    seed: int,
    out_dir: Path,
    save_dtype: torch.dtype | None = None,
    device: str | None = None,
    command: str | None = None,
    max_seconds: float | None = None,
) -> Path:
    """Build corpus, tokenizer, target and distilled draft (and the mid draft) of ``preset_name``
    from ``seed``; write them atomically to ``out_dir`` (replaced only when the build succeeded).

    Args:
        save_dtype: weights dtype on disk (``torch.float16`` for shipped weights).
        device: training device; default CUDA if available.
        command: the command line recorded in the model card.
        max_seconds: a wall-clock cap from the start of the build to the end of training: each
            model stops early at its share of the time left (:class:`Deadlines`); the card's
            ``budget`` records it. None: the preset's steps.
    """
    preset = PRESETS[preset_name]
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    train_device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    started = time.time()
    deadlines = Deadlines(preset, max_seconds)

    corpus = build_corpus(seed, preset.max_files, preset.prompts_per_domain, preset.heldout_percent)
    train_texts = [t for d in DOMAINS for t in corpus.text["train"][d]]
    tokenizer = train_tokenizer(iter(train_texts), preset.vocab_size)
    train_streams = encode_streams(tokenizer, corpus.text["train"])
    heldout_streams = encode_streams(tokenizer, corpus.text["heldout"])

    target = make_model(preset.target, preset, tokenizer, seed).to(train_device)
    target_losses = train(
        target, train_streams, preset, seed, desc=f"{preset_name} target", deadline=deadlines.next("target")
    )
    draft = make_model(preset.draft, preset, tokenizer, seed + 1).to(train_device)
    draft_losses = train(
        draft, train_streams, preset, seed + 1, teacher=target, desc=f"{preset_name} draft (distil)",
        deadline=deadlines.next("draft"),
    )  # fmt: skip
    deadlines.done = {"target": len(target_losses), "draft": len(draft_losses)}
    quality = evaluate(target, draft, heldout_streams, preset)
    models = {"target": target, "draft": draft}
    if preset.mid is not None:
        models[MID], mid_card = distil_mid(
            target, tokenizer, train_streams, heldout_streams, preset, seed, deadline=deadlines.next(MID)
        )
        deadlines.done[MID] = mid_card["steps"]

    card = {
        "preset": preset.to_dict(),
        "seed": seed,
        "command": command or f"python -m specrl.embedded build --preset {preset_name} --seed {seed}",
        "built_with": machine(train_device) | {"seconds": round(time.time() - started, 1)},
        "corpus": corpus.source,
        "tokens": {
            split: {d: int(len(s[d])) for d in DOMAINS}
            for split, s in (("train", train_streams), ("heldout", heldout_streams))
        },
        "parameters": {"target": target.num_parameters(), "draft": draft.num_parameters()},
        "final_train_loss": {"target": last_loss(target_losses), "draft": last_loss(draft_losses)},
        "heldout": quality,
        "draft_trained_on": [d for d, w in zip(DOMAINS, preset.mix_draft, strict=True) if w > 0],
    }
    if preset.mid is not None:
        card[MID] = mid_card
    if max_seconds is not None:
        card["budget"] = deadlines.record()

    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        for name, model in models.items():
            _save(model, tokenizer, tmp / name, save_dtype)
        (tmp / PROMPTS).write_text(json.dumps({**corpus.prompts, "sources": corpus.sources}, indent=1))
        (tmp / CARD).write_text(json.dumps(card, indent=2))
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out_dir


def last_loss(losses: list[float]) -> float:
    """The mean training loss over the last 20 steps (or all, if fewer were done)."""
    return round(sum(losses[-20:]) / len(losses[-20:]), 4)


class Deadlines:
    """A build's wall-clock cap shared out over its models as they train: each gets the time left
    in proportion to its estimated FLOPs (its preset's steps) among those still to train."""

    def __init__(self, preset, max_seconds: float | None) -> None:
        self.max_seconds = max_seconds
        self.end = None if max_seconds is None else time.monotonic() + max_seconds
        self.cost = {
            "target": preset.target_steps * training_flops(preset, preset.target),
            "draft": preset.draft_steps * training_flops(preset, preset.draft, preset.target),
        }
        self.planned = {"target": preset.target_steps, "draft": preset.draft_steps}
        if preset.mid is not None:
            steps = preset.mid_training_steps
            self.cost[MID] = steps * training_flops(preset, preset.mid, preset.target)
            self.planned[MID] = steps
        self.done: dict[str, int] = {}

    def next(self, model: str) -> float | None:
        """The deadline of ``model`` (a ``time.monotonic()`` value), which trains now; None: no cap."""
        if self.end is None:
            return None
        names = list(self.cost)
        share = self.cost[model] / sum(self.cost[name] for name in names[names.index(model) :])
        now = time.monotonic()
        return now + max(0.0, self.end - now) * share

    def record(self) -> dict:
        """The card's ``budget``: the cap, whether it was hit, the steps done and planned."""
        return {
            "max_seconds": self.max_seconds,
            "hit": any(self.done[name] < self.planned[name] for name in self.done),
            "steps": dict(self.done),
            "planned_steps": dict(self.planned),
        }


def _save(model, tokenizer, directory: Path, save_dtype: torch.dtype | None) -> None:
    model = model.to("cpu")
    if save_dtype is not None:
        model = model.to(save_dtype)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)


def distil_mid(
    target, tokenizer, train_streams, heldout_streams, preset, seed: int, deadline: float | None = None
) -> tuple[object, dict]:
    """Distil the preset's second draft (``mid``) from ``target`` as the draft is (same data mix and
    loss, its own steps or fewer if ``deadline`` passes), from seed + 2, in fp32 on a CPU; return
    it and its card entry."""
    assert preset.mid is not None
    started = time.time()
    device = next(target.parameters()).device
    mid = make_model(preset.mid, preset, tokenizer, seed + 2).to(device)
    bf16, steps = device.type == "cuda", preset.mid_training_steps
    losses = train(
        mid, train_streams, preset, seed + 2, teacher=target, desc=f"{preset.name} {MID} (distil)",
        steps=steps, bf16=bf16, deadline=deadline,
    )  # fmt: skip
    return mid, {
        "shape": asdict(preset.mid),
        "parameters": mid.num_parameters(),
        "steps": len(losses),
        "precision": "bf16 autocast" if bf16 else "fp32",
        "final_train_loss": last_loss(losses),
        "heldout": evaluate(target, mid, heldout_streams, preset),
        "seconds": round(time.time() - started, 1),
    }  # fmt: skip


def add_mid(
    pair_dir: Path,
    save_dtype: torch.dtype | None = None,
    device: str | None = None,
    command: str | None = None,
) -> Path:
    """Distil the mid draft into an already built pair (its ``draft-mid/``, written atomically) and
    record it in the card; the target, draft, tokenizer and prompts are left as they are."""  # fmt: skip
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pair_dir = Path(pair_dir)
    card = json.loads((pair_dir / CARD).read_text())
    preset = PRESETS[card["preset"]["name"]]
    if preset.mid is None:
        raise ValueError(f"preset {preset.name!r} has no mid draft (Preset.mid is None)")
    seed = card["seed"]
    train_device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    tokenizer = AutoTokenizer.from_pretrained(pair_dir / "target")
    target = (
        AutoModelForCausalLM.from_pretrained(pair_dir / "target", dtype=torch.float32).to(train_device).eval()
    )
    corpus = build_corpus(seed, preset.max_files, preset.prompts_per_domain, preset.heldout_percent)
    train_streams = encode_streams(tokenizer, corpus.text["train"])
    heldout_streams = encode_streams(tokenizer, corpus.text["heldout"])
    mid, entry = distil_mid(target, tokenizer, train_streams, heldout_streams, preset, seed)
    entry["command"] = command or f"python -m specrl.embedded add-mid {pair_dir}"

    tmp = Path(tempfile.mkdtemp(prefix=f".{MID}.", dir=pair_dir))
    try:
        _save(mid, tokenizer, tmp / MID, save_dtype)
        (tmp / CARD).write_text(json.dumps({**card, MID: entry}, indent=2))
        if (pair_dir / MID).exists():
            shutil.rmtree(pair_dir / MID)
        os.replace(tmp / MID, pair_dir / MID)
        os.replace(tmp / CARD, pair_dir / CARD)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return pair_dir
