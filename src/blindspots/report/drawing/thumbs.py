"""What every page with pictures shares: reading a pool image safely, saving a JPEG thumbnail,
one thumbnail's view-model (`Figure`, drawn by the `thumb` macro of templates/macros.html) and a
class legend's."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from blindspots.data.sources import load_or_reason
from blindspots.report.drawing.overlays import hex_colour
from blindspots.report.viewmodels.blocks import LegendItem

__all__ = ["JPEG_QUALITY", "Figure", "read_image", "save_jpeg", "legend_items"]

JPEG_QUALITY = 88


@dataclass
class Figure:
    """One picture of a page: its caption, its relative URL (None: nothing to show, `note` says why)."""

    caption: str
    src: str | None  # relative URL, or None when there is nothing to show
    note: str = ""
    full: str | None = None  # relative URL of the large view a click opens (galleries)


def read_image(pool_root: Any, image_id: str) -> tuple[np.ndarray | None, str]:
    """uint8 [H, W, 3] of a pool image, or (None, why not): from a folder (refusing paths that leave it)
    or a pool source (an object store, shards: `blindspots.scan.manifest.scan_pool_source`)."""
    return load_or_reason(pool_root, image_id)


def save_jpeg(array: np.ndarray, path: Path) -> None:
    """Write uint8 [H, W, 3] `array` as a JPEG thumbnail (folders made as needed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(array).save(path, format="JPEG", quality=JPEG_QUALITY)


def legend_items(present: set[int], names: Sequence[str], palette: np.ndarray) -> list[LegendItem]:
    """The classes `present` with their names and colours (palette: uint8 [K, 3]), in class order."""
    return [LegendItem(names[k] if 0 <= k < len(names) else f"class {k}",
                       hex_colour(palette[k]) if 0 <= k < len(palette) else "#ffffff") for k in sorted(present)]
