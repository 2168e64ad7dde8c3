"""A `--classes` file: class names in id order, optional colours and the ignore value.

Text (any extension but .json), one class per line in id order, `#` starts a comment line:

    background
    person 220 20 60          # colour as three 0..255 values (spaces or commas) ...
    car #00008e               # ... or as #rrggbb
    traffic light 250,170,30  # names may contain spaces
    ignore_index 255          # the mask value of unlabeled pixels (default 255; 'none' for no ignore value)

A line may start with its id (`3: car`); ids must then be 0..K-1 in order. JSON: `Classes.to_dict()`
(`{"names": [...], "palette": [[r, g, b], ...], "ignore_index": 255}`), a list of names, or a Hugging
Face config's `{"id2label": {"0": "wall", ...}}`. Classes without a colour get the VOC colour of their id.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from blindspots.data.classes import DEFAULT_IGNORE_INDEX, Classes, voc_palette

__all__ = ["read_classes", "parse_classes"]

_HEX = re.compile(r"^#([0-9a-fA-F]{6})$")
_IGNORE = re.compile(r"^ignore_index\s*[:=]?\s*(\S+)$", re.IGNORECASE)
_ID = re.compile(r"^(\d+)\s*:\s*(.+)$")
_COMMENT = re.compile(r"(^|\s)#(\s.*)?$")


def _colour(tokens: list[str], where: str) -> tuple[list[str], tuple[int, int, int] | None]:
    """Split trailing colour tokens off a line: (name tokens, (r, g, b) or None)."""
    m = _HEX.match(tokens[-1]) if tokens else None
    if m:
        v = int(m.group(1), 16)
        return tokens[:-1], ((v >> 16) & 255, (v >> 8) & 255, v & 255)
    if len(tokens) >= 4 and all(t.isdigit() for t in tokens[-3:]):
        rgb = tuple(int(t) for t in tokens[-3:])
        if max(rgb) > 255:
            raise ValueError(f"classes: expected colour values 0..255 in {where}, got {rgb}")
        return tokens[:-3], rgb  # type: ignore[return-value]
    return tokens, None


def _ignore_value(text: str, where: str) -> int | None:
    if text.lower() in ("none", "null", "-"):
        return None
    if not text.isdigit() or int(text) > 255:
        raise ValueError(f"classes: expected 'ignore_index' to be 0..255 or none in {where}, got {text!r}")
    return int(text)


def _build(names: list[str], colours: list[Any], ignore: int | None, where: str) -> Classes:
    if not names:
        raise ValueError(f"classes: expected at least one class name in {where}, got none")
    palette = voc_palette(len(names))
    for i, c in enumerate(colours):
        if c is not None:
            palette[i] = c
    try:
        return Classes(tuple(names), ignore, palette)
    except ValueError as e:
        raise ValueError(f"classes: {e} (in {where})") from None


def parse_classes(text: str, where: str = "classes file") -> Classes:
    """The text format of the module docstring -> Classes."""
    names: list[str] = []
    colours: list[tuple[int, int, int] | None] = []
    ignore: int | None = DEFAULT_IGNORE_INDEX
    for n, raw in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", raw).strip()  # '# ...' ends a line; '#rrggbb' is a colour
        if not line or line.startswith("#"):
            continue
        at = f"{where}, line {n}"
        m = _IGNORE.match(line)
        if m:
            ignore = _ignore_value(m.group(1), at)
            continue
        m = _ID.match(line)
        if m:
            if int(m.group(1)) != len(names):
                raise ValueError(f"classes: expected id {len(names)} (ids in order from 0) at {at}, got "
                                 f"{m.group(1)}")
            line = m.group(2)
        tokens, rgb = _colour(line.replace(",", " ").split(), at)
        if not tokens:
            raise ValueError(f"classes: expected a class name at {at}, got {raw.strip()!r}")
        names.append(" ".join(tokens))
        colours.append(rgb)
    return _build(names, colours, ignore, where)


def _from_json(data: Any, where: str) -> Classes:
    if isinstance(data, list):
        data = {"names": data}
    if not isinstance(data, dict):
        raise ValueError(f"classes: expected a JSON object or list of names in {where}, got {type(data).__name__}")
    if "id2label" in data and "names" not in data:
        table = {int(k): str(v) for k, v in data["id2label"].items()}
        if sorted(table) != list(range(len(table))):
            raise ValueError(f"classes: expected id2label ids 0..K-1 in {where}, got {sorted(table)[:10]}")
        data = {"names": [table[i] for i in range(len(table))], "ignore_index": data.get("ignore_index", DEFAULT_IGNORE_INDEX)}
    names = data.get("names")
    if not isinstance(names, list):
        raise ValueError(f"classes: expected 'names' (a list) in {where}, got {type(names).__name__}")
    colours: list[Any] = list(data.get("palette") or [None] * len(names))
    if len(colours) != len(names):
        raise ValueError(f"classes: expected one palette colour per name in {where}, got {len(colours)} for "
                         f"{len(names)} names")
    colours = [_colour([c], where)[1] if isinstance(c, str) else c for c in colours]
    ignore = data.get("ignore_index", DEFAULT_IGNORE_INDEX)
    ignore = _ignore_value(str(ignore), where) if ignore is not None else None
    return _build([str(x) for x in names], colours, ignore, where)


def read_classes(path: str | Path) -> Classes:
    """Read a classes file (text or JSON, see the module docstring) -> Classes."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"classes: expected an existing classes file, got {str(path)!r}")
    text = p.read_text(encoding="utf-8")
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"classes: expected JSON in {p}, got {e}") from None
        return _from_json(data, str(p))
    return parse_classes(text, str(p))
