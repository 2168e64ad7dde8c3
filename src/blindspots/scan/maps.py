"""Argmax maps on disk: one index PNG per model and image id, `out_dir/maps/<M>/<artifact name>`.

Written under the ids rule (`blindspots.ids.artifact_name`: "a/cat.jpg" -> "a/cat.png"); read
with `find_artifact`, so scans written before the rule ("a/cat.jpg.png") still read.
"""
from __future__ import annotations

import numpy as np
from PIL import Image

from blindspots.scan.layout import ScanLayout
from blindspots.scan.png import encode_index_png

PNG_COMPRESS_LEVEL = 1  # fast zlib level: maps are small and written once per image and model


def encode_maps(maps: np.ndarray) -> list[bytes]:
    """maps: uint8 (or int32 for C > 256, saved as 16-bit) [N, H, W] class ids -> N index PNG files' bytes."""
    return [encode_index_png(m if m.dtype == np.uint8 else m.astype(np.uint16), level=PNG_COMPRESS_LEVEL)
            for m in maps]


def write_pngs(layout: ScanLayout, model: str, ids: list[str], pngs: list[bytes]) -> None:
    """Write encoded maps (`encode_maps`), one file per id, at `layout.map_path(model, id)`."""
    made: set = set()  # folders created in this call (ids may live in subfolders)
    for image_id, data in zip(ids, pngs):
        path = layout.map_path(model, image_id)
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        with open(path, "wb") as fh:
            fh.write(data)


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
