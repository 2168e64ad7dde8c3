"""Quoting what a client sent, briefly: error messages name a value without copying it whole.

A request's field can be megabytes; an error that repeats it makes the server echo whatever a
client sends, into answers and logs. `quote` keeps a few dozen characters and says how long the
value was; `clip` bounds a whole message.
"""
from __future__ import annotations

import reprlib
from typing import Any

MAX_QUOTE = 40  # characters of a value quoted back
MAX_DETAIL = 400  # characters of one error message sent back or logged
_REPR = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_REPR.maxstring = _REPR.maxother = MAX_QUOTE
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 4
_REPR.maxlevel = 2


def quote(value: Any, limit: int = MAX_QUOTE) -> str:
    """A short repr of `value`: strings and bytes cut to `limit` characters with their length said
    ("'xxxx…' (10485760 characters)"), containers to a few items, anything to ~2 x `limit`."""
    if isinstance(value, (str, bytes)):
        if len(value) <= limit:
            return repr(value)
        unit = "characters" if isinstance(value, str) else "bytes"
        return f"{value[:limit]!r}… ({len(value)} {unit})"
    return clip(_REPR.repr(value), 2 * limit)


def clip(text: str, limit: int = MAX_DETAIL) -> str:
    """`text` cut to at most `limit` characters (with "…" where it was cut)."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type: 'a string', 'an integer', 'null', ..."""
    for t, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
                    (list, "a list"), (dict, "an object"), (type(None), "null")):
        if isinstance(value, t):
            return name
    return type(value).__name__
