"""Chat requests for an instruct model, built from this machine's Python standard library (PSF
licence) and from seeded arithmetic: what a pretrained pair's draft is distilled on.

Three domains: ``code`` (write the stdlib function whose signature and docstring are given),
``prose`` (explain or summarise a stdlib docstring paragraph) and ``reasoning`` (a word problem to
solve step by step). A source file is held out by the hash of its path, as the embedded corpus does;
held-out files and seeds give the validation and test requests.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from pathlib import Path

from specrl.embedded.corpus import docstrings, is_heldout, stdlib_files

DOMAINS = ("code", "prose", "reasoning")
SOURCES = {
    "code": "signatures and docstrings of Python standard-library functions (PSF licence)",
    "prose": "docstring paragraphs of the Python standard library (PSF licence)",
    "reasoning": "seeded arithmetic word problems (specrl.pretrained.requests.word_problem)",
}
HELDOUT_PERCENT = 25
FILES = 600  # stdlib files read, spread over the whole library: enough for thousands of requests
CODE_ASKS = (
    "Write a Python function `{signature}` that does this: {doc}",
    "Implement `{signature}` in Python. {doc}",
)
PROSE_ASKS = (
    "Explain in plain words what this means:\n\n{text}",
    "Summarise this in one or two sentences:\n\n{text}",
    "Rewrite this so a beginner understands it:\n\n{text}",
)


def functions_of(source: str) -> list[tuple[str, str]]:
    """(signature, first docstring paragraph) of the documented public functions of a module."""
    found = []
    for node, doc in docstrings(source):
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            doc = doc.split("\n\n")[0].strip()
            if 40 <= len(doc) <= 400:
                found.append((f"{node.name}({ast.unparse(node.args)})", " ".join(doc.split())))
    return found


def paragraphs_of(source: str) -> list[str]:
    """Docstring paragraphs of a module of 150 to 600 characters that read as prose."""
    found = []
    for _, doc in docstrings(source):
        for paragraph in doc.split("\n\n"):
            text = " ".join(paragraph.split())
            letters = sum(c.isalpha() or c == " " for c in text)
            if 150 <= len(text) <= 600 and letters > 0.85 * len(text):
                found.append(text)
    return found


def word_problem(rng: random.Random) -> str:
    """A two- or three-step arithmetic word problem."""
    a, b, c = rng.randint(3, 40), rng.randint(2, 25), rng.randint(2, 9)
    item, person = (
        rng.choice(("apples", "books", "pencils", "tickets", "boxes")),
        rng.choice(("Ana", "Ben", "Chen", "Dara", "Eli", "Farah")),
    )
    templates = (
        f"{person} buys {a} {item} at {b} dollars each and pays with {c * a * b // c + 10 * c} dollars. "
        "How much change do they get?",
        f"A train travels {a * c} km in {c} hours, then {b * c} km in {c} hours. What is its average speed?",
        f"{person} has {a * c} {item} and shares them equally among {c} friends, keeping {b} extra "
        f"{item} bought later for themselves. How many {item} does each friend get, and how many does "
        f"{person} keep?",
        f"A rectangle is {a} cm long and {b} cm wide. What are its area and its perimeter? "
        f"If both sides grow by {c} cm, by how much does the area grow?",
        f"A shop sells {item} in packs of {c}. {person} needs {a * c + b} {item}. How many packs must "
        "they buy, and how many are left over?",
    )
    return rng.choice(templates) + rng.choice((" Think step by step.", " Explain your reasoning.", ""))


def requests(seed: int = 0, per_domain: int = 256, evaluation: int = 64) -> dict[str, dict[str, list[str]]]:
    """split -> domain -> user messages: ``per_domain`` training requests per domain, and
    ``evaluation`` each for validation and test (from held-out files and other seeds)."""
    rng = random.Random(seed)
    root = Path(sysconfig.get_paths()["stdlib"])
    pools: dict[str, dict[str, list[str]]] = {
        split: {"code": [], "prose": []} for split in ("train", "heldout")
    }
    for path in stdlib_files(FILES):
        split = "heldout" if is_heldout(path.relative_to(root).as_posix(), HELDOUT_PERCENT) else "train"
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        pools[split]["code"] += [
            rng.choice(CODE_ASKS).format(signature=signature, doc=doc)
            for signature, doc in functions_of(source)
        ]
        pools[split]["prose"] += [rng.choice(PROSE_ASKS).format(text=text) for text in paragraphs_of(source)]
    out: dict[str, dict[str, list[str]]] = {"train": {}, "validation": {}, "test": {}}
    for domain in ("code", "prose"):
        train, heldout = sorted(set(pools["train"][domain])), sorted(set(pools["heldout"][domain]))
        rng.shuffle(train)
        rng.shuffle(heldout)
        out["train"][domain] = train[:per_domain]
        out["validation"][domain] = heldout[:evaluation]
        out["test"][domain] = heldout[evaluation : 2 * evaluation]
    for split, count, offset in (
        ("train", per_domain, 0),
        ("validation", evaluation, 1),
        ("test", evaluation, 2),
    ):
        problems = random.Random(f"{seed}-{offset}")
        out[split]["reasoning"] = [word_problem(problems) for _ in range(count)]
    return out


def heldout_records(seed: int = 0, per_domain: int = 128, distilled: int = 256) -> list[dict[str, str]]:
    """The held-out requests, up to ``per_domain`` of each domain, as prompt-file records
    (``{"text": message, "domain": ..., "source": ...}``): from the files and seeds a pretrained
    pair's draft was not distilled on (``distilled`` training requests per domain, ``seed``), less
    any text among those training requests (the same docstring can sit in two files)."""
    sets = requests(seed, per_domain=distilled, evaluation=per_domain // 2)
    trained = {message for messages in sets["train"].values() for message in messages}
    return [
        {"text": message, "domain": domain, "source": SOURCES[domain]}
        for domain in DOMAINS
        for split in ("validation", "test")
        for message in sets[split][domain]
        if message not in trained
    ]
