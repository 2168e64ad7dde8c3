"""`classes=FILE`: class names, optional colours and ignore value from a JSON or text file.

JSON, any of:
  ["sky", "road", "car"]
  {"names": [...], "palette" (or "colors"/"colours"): [[r, g, b], ...], "ignore_index": 255}
  [{"name": "sky", "color": [r, g, b]}, ...]            (objects, in class-id order)
  {"0": "sky", "1": "road"}                              (an id2label map)
Text: one class per line in class-id order, `name` or `name r,g,b` or `name #rrggbb`;
`ignore_index: 255` (or `ignore: none`) sets the ignore value; blank lines and comments
(lines starting with `#`) are skipped. Without an ignore value: 255 (None when 255 is a class id).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np

from blindspots.data.classes import DEFAULT_IGNORE_INDEX, Classes

_COLOUR = re.compile(r"^(?:(\d{1,3}),(\d{1,3}),(\d{1,3})|#([0-9a-fA-F]{6}))$")
_IGNORE = re.compile(r"^ignore(?:_index)?\s*[:=]\s*(\S+)$", re.IGNORECASE)
_UNSET = object()


def read_classes_file(path: str | Path) -> Classes:
    """A `Classes` from a JSON or text classes file (see the module docstring)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"classes: expected an existing JSON or text file, got {str(path)!r}")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json" or text.lstrip()[:1] in ("[", "{"):
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ValueError(f"classes: expected valid JSON in {str(path)!r}, got {e}") from None
        names, colours, ignore = _from_json(data, path)
    else:
        names, colours, ignore = _from_text(text, path)
    return _build(names, colours, ignore, path)


def _from_json(data: Any, path: Path) -> tuple[list[str], list[Any], Any]:
    if isinstance(data, dict) and "names" in data:
        colours = data.get("palette", data.get("colors", data.get("colours")))
        return list(data["names"]), list(colours) if colours is not None else [], data.get("ignore_index", _UNSET)
    if isinstance(data, dict) and data and all(str(k).isdigit() for k in data):
        ids = sorted(int(k) for k in data)
        if ids != list(range(len(ids))):
            raise ValueError(f"classes: expected ids 0..{len(ids) - 1} in {str(path)!r}, got {ids}")
        return [str(data[k] if k in data else data[str(k)]) for k in ids], [], _UNSET
    if isinstance(data, list) and data and all(isinstance(d, dict) for d in data):
        if any("name" not in d for d in data):
            raise ValueError(f"classes: expected a 'name' in every object of {str(path)!r}")
        return [d["name"] for d in data], [d.get("color", d.get("colour")) for d in data], _UNSET
    if isinstance(data, list) and all(isinstance(d, str) for d in data):
        return list(data), [], _UNSET
    raise ValueError(f"classes: expected a list of names, {{'names': [...]}}, a list of {{'name': ...}} objects "
                     f"or an id -> name map in {str(path)!r}, got {type(data).__name__}")


def _from_text(text: str, path: Path) -> tuple[list[str], list[Any], Any]:
    names: list[str] = []
    colours: list[Any] = []
    ignore: Any = _UNSET
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _IGNORE.match(line)
        if m:
            ignore = None if m.group(1).lower() == "none" else _int(m.group(1), f"line {n}", path)
            continue
        head, _, last = line.rpartition(" ")
        if head and _COLOUR.match(last):
            names.append(head.strip())
            colours.append(last)
        else:
            names.append(line)
            colours.append(None)
    return names, colours, ignore


def _int(value: str, where: str, path: Path) -> int:
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"classes: expected an integer ignore value at {where} of {str(path)!r}, "
                         f"got {value!r}") from None


def _colour(c: Any, i: int, path: Path) -> tuple[int, int, int]:
    if isinstance(c, str):
        m = _COLOUR.match(c.strip())
        if m is None:
            raise ValueError(f"classes: expected a colour 'r,g,b' or '#rrggbb' for class {i} in {str(path)!r}, "
                             f"got {c!r}")
        if m.group(4):
            c = [int(m.group(4)[k:k + 2], 16) for k in (0, 2, 4)]
        else:
            c = [int(m.group(k)) for k in (1, 2, 3)]
    if not isinstance(c, (list, tuple)) or len(c) != 3 or not all(isinstance(v, int) and 0 <= v <= 255 for v in c):
        raise ValueError(f"classes: expected a colour [r, g, b] in 0..255 for class {i} in {str(path)!r}, got {c!r}")
    return int(c[0]), int(c[1]), int(c[2])


def _build(names: list[str], colours: list[Any], ignore: Any, path: Path) -> Classes:
    if not names:
        raise ValueError(f"classes: expected at least one class name in {str(path)!r}, got none")
    if ignore is _UNSET:
        ignore = DEFAULT_IGNORE_INDEX if len(names) <= DEFAULT_IGNORE_INDEX else None
    elif ignore is not None and (isinstance(ignore, bool) or not isinstance(ignore, int)):
        raise ValueError(f"classes: expected an integer ignore_index (or null) in {str(path)!r}, got {ignore!r}")
    palette = None
    if any(c is not None for c in colours):
        if len(colours) != len(names) or any(c is None for c in colours):
            raise ValueError(f"classes: expected a colour for every class or for none in {str(path)!r}, "
                             f"got {sum(c is not None for c in colours)} colours for {len(names)} classes")
        palette = np.array([_colour(c, i, path) for i, c in enumerate(colours)], dtype=np.uint8)
    try:
        return Classes(tuple(str(n) for n in names), ignore, palette)
    except ValueError as e:
        raise ValueError(f"classes: in {str(path)!r}: {e}") from None
