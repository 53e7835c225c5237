"""Pydantic's validation errors as one sentence that names the key and the fix (the nearest valid
name of an unknown key, what a wrong value should be), for every YAML specrl reads."""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError

MAPPING = "a mapping of keys to values"
EXPECTED = {
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "string_type": "a string",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "dict_type": MAPPING,
    "model_type": MAPPING,
    "model_attributes_type": MAPPING,
    "dataclass_type": MAPPING,
    "dataclass_exact_type": MAPPING,
    "list_type": "a list",
    "tuple_type": "a list",
}
BOUNDS = {"greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=", "less_than": "<"}
# A key no field has: pydantic models and dataclasses with extra="forbid", or a plain dataclass.
UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")


def key_of(loc: Sequence[str | int]) -> str:
    """``('shift', 0, 'domain')`` as ``shift[0].domain``."""
    key = ""
    for part in loc:
        key += f"[{part}]" if isinstance(part, int) else f".{part}" if key else str(part)
    return key


def nearest(name: str, known: Sequence[str]) -> str:
    """`` Did you mean 'x'?`` for the known name nearest ``name``, or nothing."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" Did you mean '{close[0]}'?" if close else ""


def unknown_key(loc: Sequence[str | int], known: Sequence[str]) -> str:
    """The key at ``loc`` is not one of ``known``: in words, with the nearest known name."""
    where = f"'{key_of(loc[:-1])}'" if loc[:-1] else "the top level"
    hint = nearest(str(loc[-1]), known)
    return f"unknown key '{key_of(loc)}' in {where}.{hint} Known keys: {', '.join(known)}"


def explain(
    error: ValidationError,
    known_keys: Callable[[tuple[str | int, ...]], Sequence[str]],
    hints: Mapping[str, str] | None = None,
) -> str:
    """The first error of ``error`` in words. ``known_keys(loc)``: the keys valid at ``loc`` (for an
    unknown key); ``hints``: key (indices left out, ``batch.load``) -> what it must be, e.g.
    ``"a list of [seconds, rate] phases"``, said of a wrong value at that key, and added to what is
    said of one under it."""
    first = error.errors(include_url=False)[0]
    loc, kind, value = tuple(first["loc"]), first["type"], first["input"]
    loc = tuple(part for part in loc if not (isinstance(part, str) and part.startswith("function-")))
    key = key_of(loc)
    if kind in UNKNOWN:
        return unknown_key(loc, known_keys(loc[:-1]))
    names = ".".join(str(part) for part in loc if not isinstance(part, int))
    under = [(k, h) for k, h in (hints or {}).items() if names == k or names.startswith(k + ".")]
    hint_key, hint = max(under, default=("", ""))  # the longest key: the nearest
    said = f" ('{hint_key}' must be {hint})" if hint and hint_key != key else ""
    if kind == "missing":
        return f"'{key_of(loc[:-1])}' is missing ['{loc[-1]}']{said}"
    if kind in ("value_error", "assertion_error"):
        return str(first["ctx"]["error"])
    if kind in BOUNDS:
        bound = next(iter(first["ctx"].values()))
        return f"{key} must be {BOUNDS[kind]} {bound}, got {value!r}"
    if kind == "literal_error":
        choices = first["ctx"]["expected"].replace(" or ", ", ")
        return f"{key} must be one of ({choices}), got {value!r}"
    if not loc:
        return f"the top level must be {MAPPING}, got {value!r}"
    expected = (
        hint
        if hint and hint_key == key
        else EXPECTED.get(kind, first["msg"].removeprefix("Input should be "))
    )
    return f"'{key}' must be {expected}, got {value!r}{said}"


def known_fields(model: Any) -> list[str]:
    """The field names of a pydantic model or a dataclass (pydantic's or a plain one)."""
    if dataclasses.is_dataclass(model):
        return [f.name for f in dataclasses.fields(model)]
    return list(model.model_fields)
