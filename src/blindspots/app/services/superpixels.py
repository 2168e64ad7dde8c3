"""Superpixels for the label editor's superpixel brush: SLIC segments (`blindspots.data.superpixels`),
computed on the server once per image and cached (a person flips back and forth)."""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable

import numpy as np

from blindspots.data.superpixels import MAX_SEGMENTS, PIXELS_PER_SEGMENT, WORK_PIXELS, n_segments_for, slic_segments

__all__ = ["MAX_SEGMENTS", "PIXELS_PER_SEGMENT", "WORK_PIXELS", "SegmentCache", "n_segments_for", "slic_segments"]


class SegmentCache:
    """A small thread-safe LRU of computed superpixels, keyed by whatever names the image; bounded by
    count and by bytes (one 1280x1024 uint16 map is 2.6 MB; 128 int32 ones would be 670 MB)."""

    def __init__(self, size: int = 128, max_bytes: int = 256 * 1024 * 1024) -> None:
        self.size, self.max_bytes = size, max_bytes
        self._d: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Any, make: Callable[[], np.ndarray]) -> np.ndarray:
        with self._lock:
            if key in self._d:
                self._d.move_to_end(key)
                return self._d[key]
        value = make()  # outside the lock: SLIC takes a while on big images
        with self._lock:
            self._d[key] = value
            while len(self._d) > 1 and (len(self._d) > self.size or self.nbytes() > self.max_bytes):
                self._d.popitem(last=False)
        return value

    def nbytes(self) -> int:
        """Bytes held by the cached arrays."""
        return sum(int(getattr(v, "nbytes", 0)) for v in self._d.values())

    def __len__(self) -> int:
        return len(self._d)
