"""A model folder's ``SHA256SUMS``: written when the folder is made, verified when it is loaded, so
a damaged or half-copied file is refused rather than loaded as different weights."""

from __future__ import annotations

from pathlib import Path

from specrl.io import sha256

MANIFEST = "SHA256SUMS"


class ChecksumError(OSError):
    """A file of a model folder is missing or differs from its recorded checksum."""


def write_manifest(folder: Path) -> None:
    """Record the checksum of every file in ``folder`` (in ``sha256sum``'s format)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST)
    lines = [f"{sha256(p)}  {p.relative_to(folder).as_posix()}" for p in files]
    (folder / MANIFEST).write_text("\n".join(lines) + "\n")


def verify_manifest(folder: Path, fix: str) -> None:
    """Raise :class:`ChecksumError` (ending with ``fix``) unless every file ``folder``'s manifest
    names is there with its recorded checksum."""
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise ChecksumError(f"{folder} has no {MANIFEST}: it was not written by a complete fetch; {fix}")
    for line in manifest.read_text().splitlines():
        recorded, name = line.split("  ", 1)
        path = folder / name
        if not path.is_file():
            raise ChecksumError(f"{path} is missing; {fix}")
        if sha256(path) != recorded:
            raise ChecksumError(f"{path} does not match its recorded checksum (the file is damaged); {fix}")
