"""Image grids: tile uint8 images into one picture and write it as PNG."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def image_grid(images: np.ndarray, ncols: int = 10, pad: int = 1, pad_value: int = 128) -> np.ndarray:
    """uint8 [N, H, W, C] -> uint8 [rows*(H+pad)+pad, ncols*(W+pad)+pad, 3], row-major tiles."""
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] not in (1, 3):
        raise ValueError(f"images: expected uint8 [N, H, W, C] with C in (1, 3), got {images.dtype} {images.shape}")
    if ncols < 1:
        raise ValueError(f"ncols: expected a positive integer, got {ncols}")
    if images.shape[-1] == 1:
        images = np.repeat(images, 3, axis=-1)
    n, h, w, _ = images.shape
    ncols = min(ncols, max(n, 1))
    rows = max(1, -(-n // ncols))
    out = np.full((rows * (h + pad) + pad, ncols * (w + pad) + pad, 3), pad_value, dtype=np.uint8)
    for i in range(n):
        r, c = divmod(i, ncols)
        out[pad + r * (h + pad):pad + r * (h + pad) + h, pad + c * (w + pad):pad + c * (w + pad) + w] = images[i]
    return out


def save_grid(images: np.ndarray, path: str | Path, ncols: int = 10, scale: int = 1) -> Path:
    """Write `image_grid(images)` to `path` (PNG), each pixel enlarged `scale` times (nearest)."""
    grid = image_grid(images, ncols)
    if scale > 1:
        grid = np.repeat(np.repeat(grid, scale, axis=0), scale, axis=1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(grid).save(path)
    return path
