"""The drawing surface of a scene (albedo, glow and label mask) and its noise and colour helpers."""
from __future__ import annotations

import math

import numpy as np

class Canvas:
    """Float albedo, glow (light emitted at dusk/night) and label mask on an n×n canvas.

    Coordinates are relative to the visible size×size frame (x, y in [0, 1] visible); the canvas
    is larger than the frame when the camera is tilted, so rotation leaves no empty corners.
    """

    def __init__(self, size: int, tilt: float) -> None:
        a = math.radians(abs(tilt))
        self.size = size
        self.n = size if a == 0 else int(math.ceil(size * (math.cos(a) + math.sin(a)))) + 2
        self.off = (self.n - size) / 2.0
        # channel-first [3, n, n]: per-pixel maps broadcast over channels without strided loops
        self.albedo = np.zeros((3, self.n, self.n), np.float32)
        self.glow = np.zeros((3, self.n, self.n), np.float32)
        self.mask = np.zeros((self.n, self.n), np.uint8)
        coords = ((np.arange(self.n, dtype=np.float32) + 0.5 - self.off) / size).astype(np.float32)
        self.xs = coords[None, :]  # [1, n]
        self.ys = coords[:, None]  # [n, 1]

    def box(self, x0: float, y0: float, x1: float, y1: float):
        """Pixel slices covering a relative box, and local coordinate grids; None if empty."""
        s, o, n = self.size, self.off, self.n
        j0, j1 = max(int(math.floor(x0 * s + o)), 0), min(int(math.ceil(x1 * s + o)), n)
        i0, i1 = max(int(math.floor(y0 * s + o)), 0), min(int(math.ceil(y1 * s + o)), n)
        if j0 >= j1 or i0 >= i1:
            return None
        return (slice(i0, i1), slice(j0, j1)), self.ys[i0:i1], self.xs[:, j0:j1]

    def _put(self, sl, m, cls: int, color, glow=None) -> None:
        a = self.albedo[:, sl[0], sl[1]]
        mk = self.mask[sl]
        color = np.asarray(color, np.float32)
        if m is None:
            a[...] = color[:, None, None]
            mk[...] = cls
            if glow is not None:
                self.glow[:, sl[0], sl[1]] = np.asarray(glow, np.float32)[:, None, None]
        else:
            a[:, m] = color[:, None]
            mk[m] = cls
            if glow is not None:
                self.glow[:, sl[0], sl[1]][:, m] = np.asarray(glow, np.float32)[:, None]

    def rect(self, x0, y0, x1, y1, cls, color, glow=None) -> None:
        # pixels whose centre lies in [x0, x1) × [y0, y1): a plain slice, no mask needed
        s, o, n = self.size, self.off, self.n
        j0, j1 = max(math.ceil(x0 * s + o - 0.5), 0), min(math.ceil(x1 * s + o - 0.5), n)
        i0, i1 = max(math.ceil(y0 * s + o - 0.5), 0), min(math.ceil(y1 * s + o - 0.5), n)
        if j0 < j1 and i0 < i1:
            self._put((slice(i0, i1), slice(j0, j1)), None, cls, color, glow)

    def ellipse(self, cx, cy, rx, ry, cls, color, glow=None) -> None:
        if rx < 1e-6 or ry < 1e-6:  # sub-pixel: nothing to draw (and no overflow below)
            return
        b = self.box(cx - rx, cy - ry, cx + rx, cy + ry)
        if b is not None:
            sl, y, x = b
            m = ((x - cx) / rx) ** 2 + ((y - cy) / ry) ** 2 <= 1.0
            self._put(sl, m, cls, color, glow)

    def trapezoid(self, y0, y1, cx, w0, w1, cls, color) -> None:
        """Horizontal-based trapezoid centred at cx: width w0 at row y0 (top), w1 at y1 (bottom)."""
        b = self.box(cx - max(w0, w1) / 2, y0, cx + max(w0, w1) / 2, y1)
        if b is not None and y1 > y0:
            sl, y, x = b
            half = (w0 + (w1 - w0) * (y - y0) / (y1 - y0)) / 2
            m = (y >= y0) & (y < y1) & (np.abs(x - cx) <= half)
            self._put(sl, m, cls, color)

    def glow_spot(self, cx, cy, r, color) -> None:
        """Additive soft light (no label change), e.g. a street lamp at night."""
        b = self.box(cx - 3 * r, cy - 3 * r, cx + 3 * r, cy + 3 * r)
        if b is not None and r > 0:
            sl, y, x = b
            w = np.exp(-(((x - cx) ** 2 + (y - cy) ** 2) / (r * r)))
            self.glow[:, sl[0], sl[1]] += w[None] * np.asarray(color, np.float32)[:, None, None]


def smooth_noise(rng: np.random.Generator, n: int, cells: int) -> np.ndarray:
    """Bilinearly upsampled Gaussian noise, float32 [n, n], about unit variance, `cells` bumps across."""
    g = rng.standard_normal((cells + 2, cells + 2)).astype(np.float32)
    t = (np.arange(n, dtype=np.float32) + np.float32(0.5)) * np.float32(cells / n)
    i = t.astype(np.int64)
    f = (t - i.astype(np.float32))[:, None]
    rows = g[i] * (1 - f) + g[i + 1] * f              # [n, cells+2]
    fc = f.T
    return rows[:, i] * (1 - fc) + rows[:, i + 1] * fc


def fast_noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Zero-mean, unit-variance noise, float32 (a sum of two uniform bytes: near-Gaussian,
    several times faster than `standard_normal` for the per-pixel texture and sensor noise)."""
    count = int(np.prod(shape))
    b = np.frombuffer(rng.bytes(2 * count), dtype=np.uint8).astype(np.float32)
    return ((b[:count] + b[count:] - 255.0) * np.float32(1 / 104.5)).reshape(shape)


def jitter(rng: np.random.Generator, color, amount: float = 12.0) -> np.ndarray:
    c = np.asarray(color, np.float32) + rng.uniform(-amount, amount, 3).astype(np.float32)
    return np.minimum(np.maximum(c, 0.0), 255.0)  # np.clip is slow on tiny arrays

