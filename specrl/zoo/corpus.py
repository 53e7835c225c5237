"""Offline training text for the embedded pair: every Python install carries it.

Three domains:

* ``code``  - standard-library ``.py`` source files.
* ``prose`` - the docstrings and comments of those same files.
* ``math``  - procedurally generated arithmetic (seeded), out of domain for the draft.

Files are split into train and held-out sets by a hash of their relative path, so the
split is stable across machines with the same Python version. Held-out prompts are cut
only from held-out files (and from math generated with a different seed).
"""

from __future__ import annotations

import ast
import hashlib
import io
import random
import sysconfig
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

DOMAINS = ("code", "prose", "math")


@dataclass
class Corpus:
    """Raw text per domain and split: ``text[split][domain]`` is a list of documents."""

    text: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    prompts: dict[str, dict[str, list[str]]] = field(default_factory=dict)
    source: str = ""


def stdlib_files(limit: int | None = None) -> list[Path]:
    """The stdlib ``.py`` files outside site-packages, sorted for determinism."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(
        p
        for p in root.rglob("*.py")
        if "site-packages" not in p.parts and "dist-packages" not in p.parts
    )
    if not limit or limit >= len(files):
        return files
    return files[:: len(files) // limit][:limit]  # spread over the whole stdlib


def is_heldout(relative_path: str, percent: int) -> bool:
    digest = hashlib.sha256(relative_path.encode()).digest()
    return digest[0] * 100 // 256 < percent


def prose_of(source: str) -> str:
    """Docstrings and comments of a module, as plain paragraphs."""
    pieces: list[str] = []
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ""
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node)
            if doc:
                pieces.append(doc.strip())
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


def build_corpus(
    seed: int, max_files: int | None, prompts_per_domain: int, heldout_percent: int
) -> Corpus:
    """Read the stdlib, split it, generate math, and cut prompt sets.

    Args:
        seed: seeds math generation and prompt cutting.
        max_files: use only the first N stdlib files (tiny preset); None for all.
        prompts_per_domain: prompts per domain in each of ``train`` and ``heldout``.
        heldout_percent: share of files (by path hash) held out of training.
    """
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

    cut_rng = random.Random(seed + 7)
    limits = {"code": (120, 400), "prose": (80, 300), "math": (40, 160)}
    for split in ("train", "heldout"):
        corpus.prompts[split] = {}
        for domain in DOMAINS:
            docs = corpus.text[split][domain]
            chosen: list[str] = []
            attempts = 0
            while docs and len(chosen) < prompts_per_domain and attempts < 50 * prompts_per_domain:
                attempts += 1
                prompt = prompt_from(cut_rng.choice(docs), cut_rng, *limits[domain])
                if prompt and prompt not in chosen:
                    chosen.append(prompt)
            corpus.prompts[split][domain] = chosen
    return corpus
