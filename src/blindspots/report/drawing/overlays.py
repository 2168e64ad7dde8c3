"""Pictures for reports: thumbnails and class maps drawn over their images.

Every function takes and returns uint8 RGB arrays [H, W, 3]; class maps are int [h, w] and may
have another size than the image (a scan with `resize`): they are scaled with nearest neighbour.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np
from PIL import Image


def thumbnail_size(height: int, width: int, max_side: int) -> tuple[int, int]:
    """(h, w) scaled so the longer side is at most `max_side` (never enlarged, at least 1 px)."""
    if max_side < 1:
        raise ValueError(f"max_side: expected a positive integer, got {max_side}")
    scale = min(1.0, max_side / max(height, width))
    return max(1, round(height * scale)), max(1, round(width * scale))


def thumbnail(image: np.ndarray, max_side: int = 320) -> np.ndarray:
    """uint8 [H, W, 3] -> uint8 [h, w, 3] with max(h, w) <= max_side (bilinear, aspect kept)."""
    h, w = thumbnail_size(image.shape[0], image.shape[1], max_side)
    if (h, w) == image.shape[:2]:
        return image
    return np.asarray(Image.fromarray(image).resize((w, h), Image.BILINEAR))


def resize_labels(labels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """int [h, w] class map -> [size[0], size[1]], nearest neighbour (class ids are never mixed)."""
    labels = np.asarray(labels)
    if labels.shape == tuple(size):
        return labels
    rows = (np.arange(size[0]) * labels.shape[0] // size[0]).clip(0, labels.shape[0] - 1)
    cols = (np.arange(size[1]) * labels.shape[1] // size[1]).clip(0, labels.shape[1] - 1)
    return labels[rows[:, None], cols[None, :]]


def colorize(labels: np.ndarray, palette: np.ndarray) -> np.ndarray:
    """int [h, w] -> uint8 [h, w, 3]: each class in its palette colour (uint8 [C, 3]); ids outside
    the palette are white."""
    labels = np.asarray(labels)
    out = np.full(labels.shape + (3,), 255, dtype=np.uint8)
    valid = (labels >= 0) & (labels < len(palette))
    out[valid] = np.asarray(palette, dtype=np.uint8)[labels[valid]]
    return out


def overlay(image: np.ndarray, labels: np.ndarray, palette: np.ndarray, alpha: float = 0.5,
            clear: Iterable[int] = ()) -> np.ndarray:
    """The class map drawn over the image: uint8 [H, W, 3] = (1 - alpha) * image + alpha * colour.

    labels: int [h, w] (scaled to H x W if needed); palette: uint8 [C, 3]; alpha in [0, 1].
    clear: classes left undrawn (the image shows through unchanged), e.g. the background of a
    binary model, so that the photo stays readable around the few pixels of the other class.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha: expected a value in [0, 1], got {alpha}")
    labels = resize_labels(labels, image.shape[:2])
    colour = colorize(labels, palette).astype(np.float32)
    mixed = np.clip((1.0 - alpha) * image.astype(np.float32) + alpha * colour + 0.5, 0, 255).astype(np.uint8)
    keep = np.isin(labels, list(clear))
    if keep.any():
        mixed[keep] = image[keep]
    return mixed


def clear_classes(num_classes: int) -> tuple[int, ...]:
    """Classes an overlay leaves clear: class 0 (background) of a binary model, else none."""
    return (0,) if int(num_classes) == 2 else ()


def hex_colour(rgb: np.ndarray) -> str:
    """uint8 [3] -> '#rrggbb'."""
    r, g, b = (int(x) for x in rgb)
    return f"#{r:02x}{g:02x}{b:02x}"
