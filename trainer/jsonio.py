"""The one JSON reader for text a user can supply: request bodies, uploads, imported configs.

Python's ``json`` recurses once per nested list or object, so a few kilobytes of ``[[[[...``
end in a RecursionError (a 500, or a crashed worker) instead of a sentence. :func:`loads`
first measures how deep the text nests, with a linear scan that skips over strings, and
refuses anything deeper than :data:`MAX_DEPTH` before ``json`` sees it.
"""
from __future__ import annotations

import json
import re
from itertools import accumulate
from pathlib import Path
from typing import Any

from .errors import UserError

MAX_DEPTH = 128  # lists and objects inside one another; real configs, bodies and datasets stay under 10

# A whole JSON string: quote, then runs of plain characters and escapes, then quote (unrolled, no backtracking).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


class JsonNestingError(UserError, ValueError):
    """JSON nested deeper than :data:`MAX_DEPTH`. A ValueError too, so a caller that already turns
    unreadable JSON into a sentence (``except ValueError``) covers this case as well."""


def nesting_message(subject: str = "The JSON", limit: int = MAX_DEPTH) -> str:
    """The sentence for JSON nested too deep; ``subject`` names it ("The JSON body", "Line 4")."""
    return (f"{subject} is nested more than {limit} levels deep (lists or objects inside one another); "
            f"{limit} levels is the nesting limit.")


def depth(text: str, start: int = 0) -> int:
    """How deep the JSON in ``text[start:]`` nests (0 for a number or a string).

    Works on a prefix too (a buffer cut anywhere, even inside a string): the depth of a prefix
    never exceeds that of the whole. Invalid JSON gets some number; ``json`` rejects it anyway.
    """
    outside = _STRING.sub("", text[start:] if start else text)
    cut = outside.find('"')  # an unterminated string (cut off, or invalid) runs to the end
    if cut >= 0:
        outside = outside[:cut]
    brackets = _NOT_BRACKET.sub("", outside)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def check_depth(text: str, start: int = 0, *, subject: str = "The JSON", limit: int = MAX_DEPTH) -> None:
    """Raise :class:`JsonNestingError` when ``text[start:]`` nests deeper than ``limit``."""
    if depth(text, start) > limit:
        raise JsonNestingError(nesting_message(subject, limit))


def loads(text: str | bytes, *, subject: str = "The JSON", **kwargs: Any) -> Any:
    """``json.loads`` that refuses text nested deeper than :data:`MAX_DEPTH` (JsonNestingError,
    its message starting with ``subject``). Other bad JSON raises ``json.JSONDecodeError`` as
    usual; ``kwargs`` go to ``json.loads``."""
    if isinstance(text, (bytes, bytearray)):
        text = text.decode("utf-8")
    check_depth(text, subject=subject)
    return json.loads(text, **kwargs)


def load_path(path: str | Path, **kwargs: Any) -> Any:
    """:func:`loads` of a UTF-8 file, named in the message (OSError, UnicodeDecodeError and
    ValueError as they come)."""
    path = Path(path)
    kwargs.setdefault("subject", path.name)
    return loads(path.read_text(encoding="utf-8"), **kwargs)


def json_type(value) -> str:
    """The JSON name of a Python value's type, for messages ("a JSON list, not a string")."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "list", dict: "object"}.get(type(value), type(value).__name__)
