"""Superpixels for the label editor's superpixel brush: SLIC (scikit-image) segments that snap to
image edges, computed on the server once per image and cached (a person flips back and forth)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

# Pixels per segment at each level: "coarse" (~8x8 px) saves clicks on big regions, "fine" (~4x4 px)
# follows thin objects and small parts; the editor switches with a key.
PIXELS_PER_SEGMENT = {"coarse": 64, "fine": 16}
MAX_SEGMENTS = 8000


def n_segments_for(height: int, width: int, level: str = "coarse") -> int:
    """How many SLIC segments to ask for an image of height x width at `level` ("coarse" or "fine")."""
    if level not in PIXELS_PER_SEGMENT:
        raise ValueError(f"level: expected one of {sorted(PIXELS_PER_SEGMENT)}, got {level!r}")
    return int(np.clip(height * width // PIXELS_PER_SEGMENT[level], 4, MAX_SEGMENTS))


def slic_segments(image: np.ndarray, n_segments: int | None = None, compactness: float = 10.0,
                  level: str = "coarse") -> np.ndarray:
    """SLIC superpixels of an RGB image uint8 [H, W, 3] (or gray [H, W]) -> int32 [H, W] labels 0..n-1.

    n_segments: how many to ask SLIC for (None: from the image size and `level`).

    Labels are relabelled to be consecutive from 0 (SLIC may skip numbers after enforcing connectivity).
    """
    from skimage.segmentation import slic

    img = np.asarray(image)
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=-1)
    if img.ndim != 3 or img.shape[-1] < 3 or img.shape[0] < 1 or img.shape[1] < 1:
        raise ValueError(f"image: expected uint8 [H, W, 3] or [H, W], got shape {img.shape}")
    img = img[..., :3]
    n = n_segments_for(*img.shape[:2], level=level) if n_segments is None else int(n_segments)
    if n < 1:
        raise ValueError(f"n_segments: expected an int >= 1, got {n_segments!r}")
    labels = slic(img, n_segments=n, compactness=compactness, start_label=0, channel_axis=-1)
    _, consecutive = np.unique(labels, return_inverse=True)
    return consecutive.reshape(labels.shape).astype(np.int32)


class SegmentCache:
    """A small thread-safe LRU of computed superpixels, keyed by whatever names the image."""

    def __init__(self, size: int = 128) -> None:
        self.size, self._d, self._lock = size, OrderedDict(), threading.Lock()

    def get(self, key: Any, make: Callable[[], np.ndarray]) -> np.ndarray:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        value = make()  # outside the lock: SLIC takes a while on big images
        with self._lock:
            self._d[key] = value
            while len(self._d) > self.size:
                self._d.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._d)
