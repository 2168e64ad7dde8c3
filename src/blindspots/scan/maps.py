"""Argmax maps on disk: one index PNG per model and image id, `out_dir/maps/<M>/<artifact name>`.

Written under the ids rule (`blindspots.ids.artifact_name`: "a/cat.jpg" -> "a/cat.png"); read
with `find_artifact`, so scans written before the rule ("a/cat.jpg.png") still read.
"""
from __future__ import annotations

import functools
import os

import numpy as np
from PIL import Image

from blindspots import ids as id_rules
from blindspots.scan.layout import ScanLayout
from blindspots.scan.png import encode_index_png

PNG_COMPRESS_LEVEL = 1  # fast zlib level: maps are small and written once per image and model


def encode_maps(maps: np.ndarray) -> list[bytes]:
    """maps: uint8 (or int32 for C > 256, saved as 16-bit) [N, H, W] class ids -> N index PNG files' bytes."""
    return [encode_index_png(m if m.dtype == np.uint8 else m.astype(np.uint16), level=PNG_COMPRESS_LEVEL)
            for m in maps]


@functools.lru_cache(maxsize=1 << 12)
def _artifact_name(image_id: str) -> str:
    """`ids.artifact_name`, once per id for all the models of a batch (it parses the id as a path)."""
    return id_rules.artifact_name(image_id)


def write_pngs(layout: ScanLayout, model: str, ids: list[str], pngs: list[bytes]) -> None:
    """Write encoded maps (`encode_maps`), one file per id, at `layout.map_path(model, id)`."""
    # os.path on strings, not pathlib: one file per image and model, and pathlib's parsing cost
    # about as much as encoding the map (measured on 128x128 maps)
    root = os.fspath(layout.maps_dir(model))
    made: set[str] = set()  # folders created in this call (ids may live in subfolders)
    for image_id, data in zip(ids, pngs):
        path = os.path.join(root, _artifact_name(image_id))
        parent = os.path.dirname(path)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        _write_file(path, data)


_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)


def _write_file(path: str, data: bytes) -> None:
    """Write `data` to path (created or truncated, mode 0o666 less the umask, as open(path, "wb")).

    A raw descriptor: one file per image and model, and `open()`'s buffered file object cost about
    a third more per file than the open/write/close calls themselves (measured on 2 kB maps)."""
    fd = os.open(path, _WRITE_FLAGS, 0o666)
    try:
        view = memoryview(data)
        while view:  # os.write may write less than asked (e.g. on a signal); finish the file
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def save_maps(layout: ScanLayout, model: str, ids: list[str], maps: np.ndarray) -> None:
    """maps: uint8 (or int32 for C > 256, saved as 16-bit) [N, H, W] class ids, one per id."""
    write_pngs(layout, model, ids, encode_maps(maps))


def load_map(layout: ScanLayout, model: str, image_id: str) -> np.ndarray | None:
    """The saved map of one id (array [H, W] of class ids), or None when there is none."""
    path = layout.find_map(model, image_id)
    if path is None:
        return None
    with Image.open(path) as im:
        return np.asarray(im)


def load_maps(layout: ScanLayout, model: str, ids: list[str]) -> list[np.ndarray]:
    """The saved maps of `ids` (arrays [H, W] of class ids); ValueError naming a missing file."""
    out = []
    for image_id in ids:
        m = load_map(layout, model, image_id)
        if m is None:
            raise ValueError(f"out_dir: expected the saved map {layout.map_path(model, image_id)} of a finished "
                             f"shard, got none; the scan folder is incomplete, delete "
                             f"{layout.root / 'models' / model} to redo {model!r}")
        out.append(m)
    return out
