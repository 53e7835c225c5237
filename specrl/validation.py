"""Pydantic's validation errors as one sentence that names the key and the fix: an unknown key with
the nearest valid name and the known ones, a wrong type with what was expected, a bound with the
bound, a choice with the choices, a validator's own message as it is. The scenario files and the
training YAML both read through it."""

from __future__ import annotations

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


def explain(
    error: ValidationError,
    known_keys: Callable[[tuple[str | int, ...]], Sequence[str]],
    hints: Mapping[str, str] | None = None,
) -> str:
    """The first error of ``error`` in words. ``known_keys(loc)``: the keys valid at ``loc`` (for an
    unknown key); ``hints``: key (indices left out, ``batch.load``) -> what it must be, e.g.
    ``"a list of [seconds, rate] phases"``, said of a wrong value at or under that key."""
    first = error.errors(include_url=False)[0]
    loc, kind, value = tuple(first["loc"]), first["type"], first["input"]
    loc = tuple(part for part in loc if not (isinstance(part, str) and part.startswith("function-")))
    key = key_of(loc)
    if kind == "extra_forbidden":
        known = known_keys(loc[:-1])
        where = f"'{key_of(loc[:-1])}'" if loc[:-1] else "the top level"
        return f"unknown key '{key}' in {where}.{nearest(str(loc[-1]), known)} Known keys: {', '.join(known)}"
    names = ".".join(str(part) for part in loc if not isinstance(part, int))
    hint = next((h for k, h in sorted((hints or {}).items(), reverse=True) if names.startswith(k)), None)
    if kind == "missing":
        fix = f"; write e.g. {hint}" if hint else ""
        return f"'{key_of(loc[:-1])}' is missing ['{loc[-1]}']{fix}"
    if kind in ("value_error", "assertion_error"):
        return str(first["ctx"]["error"])
    if kind in BOUNDS:
        bound = next(iter(first["ctx"].values()))
        return f"{key} must be {BOUNDS[kind]} {bound}, got {value!r}"
    if kind == "literal_error":
        choices = first["ctx"]["expected"].replace(" or ", ", ")
        return f"{key} must be one of ({choices}), got {value!r}"
    expected = hint or EXPECTED.get(kind, first["msg"].removeprefix("Input should be "))
    if not loc:
        return f"the top level must be {MAPPING}, got {value!r}"
    return f"'{key}' must be {expected}, got {value!r}"


def known_fields(model: Any) -> list[str]:
    """The field names of a pydantic model or dataclass."""
    found = getattr(model, "model_fields", None) or getattr(model, "__pydantic_fields__", None) or {}
    return list(found)
