"""The one rule for what a spec's base names: a `package.module:attr` to import, or a path.

Torch-free, so the project store can tell the two apart without loading a model
(`blindspots.models.load` holds the rest of the grammar).
"""
from __future__ import annotations

import re
from pathlib import Path

__all__ = ["MODULE_SPEC", "is_module_spec"]

#: `package.module:attr` (identifiers and dots on both sides of one colon)
MODULE_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def is_module_spec(base: str, base_dir: str | Path | None = None) -> bool:
    """True when a spec's base (the part before "?") names `package.module:attr`: it has that shape
    and is no existing file or folder (as given, or under `base_dir`). Anything else is a path, e.g.
    `runs/a-b:c.pt` or `C:\\models\\m.onnx`."""
    if not MODULE_SPEC.match(base):
        return False
    here = Path(base).expanduser()
    return not (here.exists() or (base_dir is not None and (Path(base_dir) / here).exists()))
