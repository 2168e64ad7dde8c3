"""Atomic file writes: the one helper every package uses (readers never see a partial file)."""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

__all__ = ["write_atomic"]


def write_atomic(path: str | Path, write: Callable[[Path], object], *, fsync: bool = False) -> Path:
    """Call write(tmp_path), then move tmp_path onto `path`; returns `path`.

    The temporary file sits beside `path` (same file system, so the move is atomic) and is
    named after the process and thread, so two writers of one file never share it; it is
    removed when `write` raises. fsync: flush it to disk before the move (a human's answer
    survives a power loss once the call returns).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        write(tmp)
        if fsync:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path
