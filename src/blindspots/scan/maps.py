"""Argmax maps on disk: one index PNG per model and image id, `out_dir/maps/<M>/<id>.png`."""
from __future__ import annotations

import numpy as np
from PIL import Image

from blindspots.scan.png import encode_index_png
from blindspots.scan.table import ScanLayout

PNG_COMPRESS_LEVEL = 1  # fast zlib level: maps are small and written once per image and model


def save_maps(layout: ScanLayout, model: str, ids: list[str], maps: np.ndarray) -> None:
    """maps: uint8 (or int32 for C > 256, saved as 16-bit) [N, H, W] class ids, one per id."""
    made: set = set()  # folders created in this call (ids may live in subfolders)
    for image_id, m in zip(ids, maps):
        path = layout.map_path(model, image_id)
        if path.parent not in made:
            path.parent.mkdir(parents=True, exist_ok=True)
            made.add(path.parent)
        data = encode_index_png(m if m.dtype == np.uint8 else m.astype(np.uint16), level=PNG_COMPRESS_LEVEL)
        with open(path, "wb") as fh:
            fh.write(data)


def load_maps(layout: ScanLayout, model: str, ids: list[str]) -> list[np.ndarray]:
    """The saved maps of `ids` (arrays [H, W] of class ids); ValueError naming a missing file."""
    out = []
    for image_id in ids:
        path = layout.map_path(model, image_id)
        if not path.exists():
            raise ValueError(f"out_dir: expected the saved map {path} of a finished shard, got none; "
                             f"the scan folder is incomplete, delete {layout.root / 'models' / model} "
                             f"to redo {model!r}")
        with Image.open(path) as im:
            out.append(np.asarray(im))
    return out
