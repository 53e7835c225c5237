"""A prompt file read into prompt sets ``{split: {domain: [text, ...]}}``: ``prompts.file``.

The file's suffix says its format:

* ``.jsonl``: one JSON object per line, the prompt under a named field (``text`` unless told)
  and, optionally, its domain under another; blank lines are skipped.
* ``.txt``: plain text, one prompt per block of lines, blocks separated by one or more blank
  (whitespace-only) lines. A block's lines are kept as written, indentation included, so a
  multi-line code prompt is one block; a prompt with a blank line inside, or one that must end
  in a newline, needs JSONL.
* ``.json``, ``.yaml``, ``.yml``: already split by hand, ``{split: {domain: [text, ...]}}``, read
  as is.

The prompts of a ``.jsonl`` or ``.txt`` file are split into train, validation and test by a seeded
hash of their text (:func:`split_of`), so a prompt's split depends on its text and the seed alone,
on every machine, whatever other prompts are added or removed. Duplicate texts are dropped.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from specrl.embedded.corpus import SPLITS

SPLIT_SUFFIXES = (".jsonl", ".txt")  # read and split here
PRESPLIT_SUFFIXES = (".json", ".yaml", ".yml")  # already split by hand
DEFAULT_SPLIT_FRACTIONS = {"train": 0.7, "validation": 0.15, "test": 0.15}

log = logging.getLogger(__name__)


class PromptFileError(ValueError):
    """A prompt file that cannot be read; the message names the file, the line and the fix."""


@dataclass(frozen=True)
class PromptFile:
    """A prompt file's prompt sets, and, for a file split here, how many prompts of each domain
    each split got (``counts[domain][split]``) and the seed that split them."""

    sets: dict[str, dict[str, list[str]]]
    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    seed: int | None = None

    def describe(self, domain: str) -> str:
        """How ``domain``'s prompts were split, e.g. "its 20 prompts of domain 'faq' were split
        train 14, validation 3, test 3 (split_seed 0)"; "" for a file split by hand."""
        if domain not in self.counts:
            return ""
        counts = self.counts[domain]
        splits = ", ".join(f"{split} {counts[split]}" for split in SPLITS)
        return (
            f"its {sum(counts.values())} prompts of domain '{domain}' were split {splits} "
            f"(split_seed {self.seed})"
        )


def unit_hash(text: str, seed: int) -> float:
    """A number in [0, 1) from the blake2b digest of ``f"{seed}:{text}"``: stable across runs and
    machines (unlike Python's ``hash``)."""
    digest = hashlib.blake2b(f"{seed}:{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def split_of(text: str, seed: int, fractions: Mapping[str, float]) -> str:
    """The split of a prompt: the range of ``fractions`` (in the order of ``SPLITS``) its
    :func:`unit_hash` falls in."""
    u, cumulative = unit_hash(text, seed), 0.0
    for split in SPLITS:
        cumulative += fractions[split]
        if u < cumulative:
            return split
    return [split for split in SPLITS if fractions[split] > 0][-1]  # fractions summing to 1 - epsilon


def jsonl_records(path: Path, text_field: str, domain_field: str | None, domain: str | None):
    """(domain, text) of each record of a JSONL file, in order; a record's domain is its
    ``domain_field``, else ``domain``."""
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path} line {number}"
        try:
            record = json.loads(line)
        except json.JSONDecodeError as error:
            raise PromptFileError(
                f"{where} is not valid JSON ({error.msg}, column {error.colno}): write one JSON object "
                f'per line, e.g. {{"{text_field}": "def add(a, b):"}}'
            ) from None
        if not isinstance(record, dict):
            raise PromptFileError(f'{where} is not a JSON object: write {{"{text_field}": "..."}}')
        wanted = [(text_field, "text_field")] + ([(domain_field, "domain_field")] if domain_field else [])
        for name, key in wanted:
            if name not in record:
                raise PromptFileError(
                    f"{where} has no field '{name}' (its fields: {sorted(record)}); add it, or name the "
                    f"field that holds it with prompts.{key}"
                )
            if not isinstance(record[name], str) or not record[name].strip():
                raise PromptFileError(
                    f"{where}: field '{name}' must be a non-empty string, got {record[name]!r}"
                )
        yield (record[domain_field] if domain_field else domain), record[text_field]


def txt_records(path: Path, domain: str | None):
    """(domain, text) of each blank-line-separated block of a text file, in order."""
    block: list[str] = []
    for line in [*path.read_text(encoding="utf-8").splitlines(), ""]:
        if line.strip():
            block.append(line)
        elif block:
            yield domain, "\n".join(block)
            block = []


def read_prompt_file(
    path: str | Path,
    *,
    text_field: str = "text",
    domain_field: str | None = None,
    domain: str | None = None,
    seed: int = 0,
    fractions: Mapping[str, float] = DEFAULT_SPLIT_FRACTIONS,
) -> PromptFile:
    """The prompt sets of ``path`` (the module doc describes the formats): a ``.jsonl`` or ``.txt``
    file's prompts in ``domain`` (or, JSONL only, each record's ``domain_field``), split by
    ``seed`` and ``fractions``; a ``.json``/``.yaml``/``.yml`` file as it is. Every split of a file
    split here holds every domain of the file, with an empty list where it got no prompt.

    Raises:
        PromptFileError: an unknown suffix, a record that is not valid JSON or lacks a field (its
            line number), or a file with no prompts.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix in PRESPLIT_SUFFIXES:
        try:
            return PromptFile(yaml.safe_load(path.read_text(encoding="utf-8")))  # JSON is YAML
        except yaml.YAMLError as error:
            raise PromptFileError(f"{path} is not valid JSON or YAML: {error}") from None
    if suffix == ".jsonl":
        records = list(jsonl_records(path, text_field, domain_field, domain))
        example = f'one JSON object per line, e.g. {{"{text_field}": "def add(a, b):"}}'
    elif suffix == ".txt":
        records = list(txt_records(path, domain))
        example = "prompts separated by blank lines"
    else:
        raise PromptFileError(
            f"{path}: a prompt file ends in .jsonl (one JSON record per line), .txt (prompts separated "
            f"by blank lines) or .json/.yaml/.yml (already split, {{split: {{domain: [text, ...]}}}}), "
            f"not '{path.suffix}'"
        )
    if not records:
        raise PromptFileError(f"{path} has no prompts: write {example}")
    seen: set[str] = set()
    domains = list(dict.fromkeys(d for d, _ in records))
    sets: dict[str, dict[str, list[str]]] = {split: {d: [] for d in domains} for split in SPLITS}
    for record_domain, text in records:
        if text not in seen:
            seen.add(text)
            sets[split_of(text, seed, fractions)][record_domain].append(text)
    if len(records) > len(seen):
        log.info("%s: %d duplicate prompts dropped (the first of each kept)", path, len(records) - len(seen))
    counts = {d: {split: len(sets[split][d]) for split in SPLITS} for d in domains}
    return PromptFile(sets, counts, seed)
