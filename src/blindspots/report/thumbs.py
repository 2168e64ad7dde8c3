"""What every page with pictures shares: reading a pool image safely, saving a JPEG thumbnail,
and the HTML of one figure and of a class legend."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PIL import Image

from blindspots.data.sources import load_or_reason
from blindspots.report.html import esc
from blindspots.report.overlays import hex_colour

__all__ = ["JPEG_QUALITY", "Figure", "read_image", "save_jpeg", "legend_html", "figure_html"]

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


def legend_html(present: set[int], names: Sequence[str], palette: np.ndarray) -> str:
    """A list of the classes `present` with their names and colours (palette: uint8 [K, 3])."""
    items = []
    for k in sorted(present):
        name = names[k] if 0 <= k < len(names) else f"class {k}"
        colour = hex_colour(palette[k]) if 0 <= k < len(palette) else "#ffffff"
        items.append(f'<li><span class="swatch" style="background:{colour}"></span>{esc(name)}</li>')
    return f'<ul class="legend">{"".join(items)}</ul>' if items else ""


def figure_html(f: Figure) -> str:
    """<figure> of `f`: its image, or a note saying why there is none."""
    if f.src is None:
        body = f'<div class="missing">{esc(f.note or "not available")}</div>'
    else:
        body = f'<img src="{esc(f.src)}" alt="{esc(f.caption)}" loading="lazy">'
        if f.full is not None:
            body = f'<a href="{esc(f.full)}" title="full size">{body}</a>'
    return f"<figure>{body}<figcaption>{esc(f.caption)}</figcaption></figure>"
