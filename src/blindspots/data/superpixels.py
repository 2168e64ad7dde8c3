"""SLIC superpixels (scikit-image): segments that snap to image edges. The label editor's superpixel
brush and the region queries (`blindspots.mine.regions`) ask about the same segments."""
from __future__ import annotations

import numpy as np
from PIL import Image

from blindspots.extras import require

# Lazy imports: skimage (the web app starts without them).

# Pixels per segment at each level: "coarse" (~8x8 px) saves clicks on big regions, "fine" (~4x4 px)
# follows thin objects and small parts; the editor switches with a key.
PIXELS_PER_SEGMENT = {"coarse": 64, "fine": 16}
# At most this many segments per level: on a 1280x1024 photo 8x8-px segments (20k) are specks at the
# fitted zoom and both levels hit one cap (the same granularity); ~33 px (coarse) / ~16 px (fine) there.
MAX_SEGMENTS = {"coarse": 1200, "fine": 4800}
# SLIC runs on the image scaled down to at most this many pixels (labels scaled back, nearest):
# seconds at 1280x1024 become ~0.5 s under load, and >= ~30 working pixels per fine segment remain.
WORK_PIXELS = 160_000


def n_segments_for(height: int, width: int, level: str = "coarse") -> int:
    """How many SLIC segments to ask for an image of height x width at `level` ("coarse" or "fine")."""
    if level not in PIXELS_PER_SEGMENT:
        raise ValueError(f"level: expected one of {sorted(PIXELS_PER_SEGMENT)}, got {level!r}")
    return int(np.clip(height * width // PIXELS_PER_SEGMENT[level], 4, MAX_SEGMENTS[level]))


def slic_segments(image: np.ndarray, n_segments: int | None = None, compactness: float = 10.0,
                  level: str = "coarse") -> np.ndarray:
    """SLIC superpixels of an RGB image uint8 [H, W, 3] (or gray [H, W]) -> int32 [H, W] labels 0..n-1.

    n_segments: how many to ask SLIC for (None: from the image size and `level`).

    Images over WORK_PIXELS are segmented at a reduced size and the labels scaled back (nearest), so
    a big photo costs about as much as a 400x400 one. Labels are relabelled to be consecutive from 0
    (SLIC may skip numbers after enforcing connectivity).
    """
    slic = require("skimage.segmentation", "superpixels (the labelling and region pages)").slic

    img = np.asarray(image)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=-1)
    if img.ndim != 3 or img.shape[-1] < 3 or img.shape[0] < 1 or img.shape[1] < 1:
        raise ValueError(f"image: expected uint8 [H, W, 3] or [H, W], got shape {img.shape}")
    img = img[..., :3]
    n = n_segments_for(*img.shape[:2], level=level) if n_segments is None else int(n_segments)
    if n < 1:
        raise ValueError(f"n_segments: expected an int >= 1, got {n_segments!r}")
    h, w = img.shape[:2]
    small = _shrink(np.ascontiguousarray(img, dtype=np.uint8), WORK_PIXELS)
    labels = slic(small, n_segments=n, compactness=compactness, start_label=0, channel_axis=-1)
    if labels.shape != (h, w):  # nearest back to full size: row/column index maps, no interpolation
        rows = np.minimum(np.arange(h) * labels.shape[0] // h, labels.shape[0] - 1)
        cols = np.minimum(np.arange(w) * labels.shape[1] // w, labels.shape[1] - 1)
        labels = labels[rows[:, None], cols[None, :]]
    _, consecutive = np.unique(labels, return_inverse=True)
    return consecutive.reshape(labels.shape).astype(np.int32)


def _shrink(img: np.ndarray, max_pixels: int) -> np.ndarray:
    """uint8 [H, W, 3] scaled (area-averaged) to at most max_pixels pixels; unchanged if already small."""
    h, w = img.shape[:2]
    if h * w <= max_pixels:
        return img

    k = (max_pixels / (h * w)) ** 0.5
    size = (max(1, int(w * k)), max(1, int(h * k)))
    return np.asarray(Image.fromarray(img).resize(size, Image.Resampling.BOX))
