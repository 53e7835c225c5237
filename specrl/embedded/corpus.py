"""Offline text for the embedded pair: its training corpus and its prompt sets.

The models train on three domains (``DOMAINS``): ``code``, standard-library ``.py`` files;
``prose``, their docstrings and comments; ``math``, seeded generated arithmetic (out of domain for
the draft). Files are split into train and held-out by a hash of their relative path (stable across
machines with the same Python); held-out prompts are cut only from held-out text, then dealt into
the ``validation`` and ``test`` splits (``SPLITS``, docs/design.md section 4b).

Three prompt-only domains (``PROMPT_DOMAINS``), which neither model trains on, are read from files
a Debian machine with Python has when the pair is built (and saved in its ``prompts.json``):
``c_header`` and ``perl`` (all three splits) and ``license`` (test only: the unseen test domain).
A prompt-only domain whose files are absent gets no prompts.
"""

from __future__ import annotations

import ast
import hashlib
import io
import random
import sysconfig
import tokenize
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path

from specrl.names import SPLITS  # prompt splits: see the module doc

DOMAINS = ("code", "prose", "math")  # what the pair's models train on
EVALUATION_BLOCK = 8  # held-out prompts are dealt into test and validation in blocks of this size
LIMITS = {"code": (120, 400), "prose": (80, 300), "math": (40, 160)}  # prompt length (chars) per domain


@dataclass
class Corpus:
    """Raw text per domain and split: ``text[split][domain]`` is a list of documents;
    ``prompts[split][domain]`` the prompt sets; ``sources[domain]`` where a domain's text is from."""

    text: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    prompts: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    source: str = ""


# Where each domain's text comes from (saved as "sources" in a pair's prompts.json).
TRAINING_SOURCES = {
    "code": "Python standard-library .py files (sysconfig.get_paths()['stdlib'])",
    "prose": "docstrings and comments of the Python standard-library .py files",
    "math": "procedurally generated arithmetic (specrl.embedded.corpus.math_document, seeded)",
}


def stdlib_files(limit: int | None = None) -> list[Path]:
    """The stdlib ``.py`` files outside site-packages, sorted for determinism."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p for p in root.rglob("*.py") if "site-packages" not in p.parts and "dist-packages" not in p.parts
    )
    if not limit or limit >= len(files):
        return files
    return files[:: len(files) // limit][:limit]  # spread over the whole stdlib


def is_heldout(relative_path: str, percent: int) -> bool:
    digest = hashlib.sha256(relative_path.encode()).digest()
    return digest[0] * 100 // 256 < percent


def docstrings(source: str) -> list[tuple[ast.AST, str]]:
    """(node, docstring) of a module's own, its classes' and its functions', in ``ast.walk``'s
    order, those without one left out; none for a source that does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    nodes = (node for node in ast.walk(tree) if isinstance(node, documented))
    return [(node, doc) for node in nodes if (doc := ast.get_docstring(node))]


def prose_of(source: str) -> str:
    """Docstrings and comments of a module, as plain paragraphs."""
    pieces = [doc.strip() for _, doc in docstrings(source)]
    comment_lines: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                text = token.string.lstrip("#").strip()
                if text and not text.startswith("!") and "coding" not in text:
                    comment_lines.append(text)
            elif comment_lines and token.type not in (tokenize.NL, tokenize.NEWLINE):
                pieces.append(" ".join(comment_lines))
                comment_lines = []
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    return "\n\n".join(p for p in pieces if len(p) > 20)


def math_document(rng: random.Random, lines: int = 24) -> str:
    """A block of worked arithmetic, e.g. ``37 + 48 = 85`` or ``(12 * 3) - 7 = 29``."""
    out = []
    for _ in range(lines):
        kind = rng.random()
        a, b, c = rng.randint(0, 999), rng.randint(0, 99), rng.randint(1, 20)
        if kind < 0.3:
            out.append(f"{a} + {b} = {a + b}")
        elif kind < 0.5:
            out.append(f"{a} - {b} = {a - b}")
        elif kind < 0.7:
            out.append(f"{b} * {c} = {b * c}")
        elif kind < 0.85:
            out.append(f"({b} * {c}) + {a} = {b * c + a}")
        else:
            q, r = divmod(a, c)
            out.append(f"{a} // {c} = {q}, {a} % {c} = {r}")
    return "\n".join(out) + "\n"


def prompt_from(document: str, rng: random.Random, min_chars: int, max_chars: int) -> str | None:
    """A prompt cut from a document at a line boundary, between min_chars and max_chars long."""
    lines = document.splitlines(keepends=True)
    if len(document) < min_chars + 80:
        return None
    for _ in range(8):
        start = rng.randrange(len(lines))
        text = ""
        for line in lines[start:]:
            if len(text) + len(line) > max_chars:
                break
            text += line
            if len(text) >= min_chars and rng.random() < 0.35:
                break
        text = text.lstrip("\n")
        if len(text.strip()) >= min_chars:
            return text
    return None


def split_evaluation(prompts: list[str], block: int = EVALUATION_BLOCK) -> dict[str, list[str]]:
    """Held-out prompts dealt into ``test`` and ``validation`` in alternating blocks of
    ``min(block, len(prompts) // 2)`` prompts (at least 1), the first to test: with 64 prompts,
    test gets 0-7, 16-23, ... and validation 8-15, 24-31, ..."""
    size = max(1, min(block, len(prompts) // 2))
    splits: dict[str, list[str]] = {"test": [], "validation": []}
    for start in range(0, len(prompts), size):
        splits["test" if (start // size) % 2 == 0 else "validation"].extend(prompts[start : start + size])
    return splits


def cut_prompts(
    docs: list[str], count: int, rng: random.Random, limits: tuple[int, int], exclude: Collection[str] = ()
) -> list[str]:
    """Up to ``count`` distinct prompts cut from random documents (none of ``exclude``)."""
    chosen: list[str] = []
    attempts = 0
    while docs and len(chosen) < count and attempts < 50 * count:
        attempts += 1
        prompt = prompt_from(rng.choice(docs), rng, *limits)
        if prompt and prompt not in chosen and prompt not in exclude:
            chosen.append(prompt)
    return chosen


# ---- prompt-only domains ---------------------------------------------------------------------


def python_headers() -> tuple[Path, list[Path]]:
    """The C headers of this Python install (``sysconfig``'s include folder), sorted."""
    root = Path(sysconfig.get_paths()["include"])
    return root, sorted(root.rglob("*.h")) if root.is_dir() else []


def perl_base_modules() -> tuple[Path, list[Path]]:
    """The ``.pm`` modules of Debian's Essential ``perl-base`` package, sorted."""
    roots = sorted(Path("/usr/lib").glob("*/perl-base"))
    root = roots[0] if roots else Path("/usr/lib/perl-base")
    return root, sorted(root.rglob("*.pm")) if root.is_dir() else []


def common_licenses() -> tuple[Path, list[Path]]:
    """The license texts of Debian's ``base-files`` (symlinks such as GPL -> GPL-3 skipped)."""
    root = Path("/usr/share/common-licenses")
    files = sorted(p for p in root.iterdir() if p.is_file() and not p.is_symlink()) if root.is_dir() else []
    return root, files


@dataclass(frozen=True)
class PromptSource:
    """A prompt-only domain: where its text comes from (``description``, saved in
    ``prompts.json``), ``files()`` (its folder and sorted files, empty when absent), its splits
    (``SPLITS``, or ``("test",)``), its prompts' length limits in characters and the share of
    files held out for validation and test prompts."""

    description: str
    files: Callable[[], tuple[Path, list[Path]]]
    splits: tuple[str, ...]
    limits: tuple[int, int]
    heldout_percent: int = 30


PROMPT_DOMAINS: dict[str, PromptSource] = {
    "c_header": PromptSource(
        "C headers of the Python install (sysconfig.get_paths()['include'], **/*.h); PPO training domain",
        python_headers,
        SPLITS,
        (120, 400),
    ),
    "perl": PromptSource(
        "Perl modules of Debian's Essential package perl-base (/usr/lib/<multiarch>/perl-base/**/*.pm); "
        "PPO training domain",
        perl_base_modules,
        SPLITS,
        (120, 400),
    ),
    "license": PromptSource(
        "license texts of Debian's Essential package base-files (/usr/share/common-licenses); the unseen "
        "test domain: test prompts only, seen by no training, distillation or selection",
        common_licenses,
        ("test",),
        (80, 300),
    ),
}


def read_texts(paths: list[Path]) -> list[str]:
    """The UTF-8 texts of ``paths`` (unreadable files skipped), each once."""
    texts: dict[str, None] = {}
    for path in paths:
        try:
            texts[path.read_text(encoding="utf-8")] = None
        except (UnicodeDecodeError, OSError):
            continue
    return list(texts)


def source_prompts(name: str, source: PromptSource, seed: int, count: int) -> dict[str, list[str]]:
    """A prompt-only domain's prompts per split: ``count`` train prompts from train files and
    ``count`` held-out ones (dealt into validation and test) from held-out files; a test-only
    domain cuts ``count // 2`` test prompts (the size of the others' test split) from every file."""
    root, paths = source.files()
    rng = random.Random(f"{seed}:{name}")
    if source.splits == ("test",):
        return {"test": cut_prompts(read_texts(paths), max(1, count // 2), rng, source.limits)}
    held = [is_heldout(str(p.relative_to(root)), source.heldout_percent) for p in paths]
    train_docs = read_texts([p for p, h in zip(paths, held, strict=True) if not h])
    heldout_docs = read_texts([p for p, h in zip(paths, held, strict=True) if h])
    train = cut_prompts(train_docs, count, rng, source.limits)
    heldout = cut_prompts(heldout_docs, count, rng, source.limits, exclude=set(train))
    return {"train": train, **split_evaluation(heldout)}


def build_corpus(seed: int, max_files: int | None, prompts_per_domain: int, heldout_percent: int) -> Corpus:
    """Read the stdlib, split it, generate math, and cut prompt sets (module doc): ``seed`` seeds
    math and prompt cutting; ``max_files`` (None: all) stdlib files are read; ``prompts_per_domain``
    in ``train``, and in ``validation`` and ``test`` together; ``heldout_percent`` of files held out."""
    root = Path(sysconfig.get_paths()["stdlib"])
    corpus = Corpus(text={s: {d: [] for d in DOMAINS} for s in ("train", "heldout")})
    files = stdlib_files(max_files)
    for path in files:
        try:
            source = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        split = "heldout" if is_heldout(str(path.relative_to(root)), heldout_percent) else "train"
        corpus.text[split]["code"].append(source)
        prose = prose_of(source)
        if prose:
            corpus.text[split]["prose"].append(prose)
    n_math = max(40, len(files))
    train_rng, heldout_rng = random.Random(seed), random.Random(seed + 1_000_003)
    corpus.text["train"]["math"] = [math_document(train_rng) for _ in range(n_math)]
    corpus.text["heldout"]["math"] = [math_document(heldout_rng) for _ in range(max(8, n_math // 20))]
    corpus.source = f"{len(files)} stdlib files under {root}"
    corpus.sources = {**TRAINING_SOURCES, **{name: s.description for name, s in PROMPT_DOMAINS.items()}}

    cut_rng = random.Random(seed + 7)
    cut = {
        split: {
            d: cut_prompts(corpus.text[split][d], prompts_per_domain, cut_rng, LIMITS[d]) for d in DOMAINS
        }
        for split in ("train", "heldout")  # this order of cuts is the shipped prompts'
    }
    corpus.prompts = {split: {} for split in SPLITS}
    for domain in DOMAINS:
        corpus.prompts["train"][domain] = cut["train"][domain]
        for split, prompts in split_evaluation(cut["heldout"][domain]).items():
            corpus.prompts[split][domain] = prompts
    for name, source in PROMPT_DOMAINS.items():
        for split, prompts in source_prompts(name, source, seed, prompts_per_domain).items():
            if prompts:
                corpus.prompts[split][name] = prompts
    return corpus
