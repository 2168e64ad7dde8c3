"""Procedural street scenes with pixel labels and recorded conditions.

A scene is a one-point-perspective street: sky, a road with lane markings, tiled sidewalks,
building facades with windows (or a park with trees), street trees, lamp poles and signs,
cars, buses and people, painted far-to-near so the label mask is exact. Every scene records
the *conditions* it was rendered under (lighting, object scale, colour shift, occlusion,
clutter, viewpoint). A model trained on the narrow "train" slice of conditions fails in
predictable, measurable ways outside it (`SceneConditions.is_hard`), which is what MAD
mining (../shared/papers/mad-troubleshooting-segmentation.txt) is meant to find.

Rendering is vectorised numpy (no per-pixel Python loops). The same seed gives the same
scene; the layout of a seed does not depend on the conditions' lighting / colour shift /
viewpoint, so `render_scene(s, conditions=replace(c, lighting="night"))` is the same street
at night. Geometry is in relative units, so one seed gives the same street at any size.
"""
from __future__ import annotations

import csv
import logging
import math
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from blindspots.data.classes import Classes

if TYPE_CHECKING:  # imported lazily at run time (another module of the data package)
    from blindspots.data.segsets import SegmentationSet

logger = logging.getLogger(__name__)

SKY, ROAD, SIDEWALK, BUILDING, VEGETATION, VEHICLE, PERSON, POLE = range(8)
SCENE_CLASSES = Classes(
    names=("sky", "road", "sidewalk", "building", "vegetation", "vehicle", "person", "pole"),
    # Cityscapes colours, so masks look familiar.
    palette=np.array(
        [[70, 130, 180], [128, 64, 128], [244, 35, 232], [70, 70, 70],
         [107, 142, 35], [0, 0, 142], [220, 20, 60], [153, 153, 153]], dtype=np.uint8),
)

LIGHTINGS = ("day", "dusk", "night")
DISTRIBUTIONS = ("train", "broad", "pool", "hard")
POOL_HARD_FRACTION = 0.05
"""Share of "pool" scenes drawn from the "hard" distribution (the rest is in-distribution)."""

# The target's training slice (inclusive). A scene with any factor outside it is hard.
TRAIN_SLICE: dict[str, tuple[float, float]] = {
    "scale": (0.8, 1.25),        # object size multiplier
    "color_shift": (-15.0, 15.0),  # hue rotation, degrees
    "occlusion": (0.0, 0.08),    # frame share covered by near occluders
    "clutter": (2, 10),          # number of cars / people / extra poles
    "horizon": (0.38, 0.52),     # horizon row, fraction of height (camera pitch)
    "tilt": (-4.0, 4.0),         # camera roll, degrees
}
# Where the "hard" distribution puts a shifted factor (clearly outside the slice).
HARD_RANGES: dict[str, tuple[tuple[float, float], ...]] = {
    "scale": ((0.3, 0.5), (2.0, 3.0)),
    "color_shift": ((-180.0, -75.0), (75.0, 180.0)),
    "occlusion": ((0.3, 0.55),),
    "clutter": ((25, 40),),
    "horizon": ((0.12, 0.25), (0.68, 0.8)),
    "tilt": ((-30.0, -14.0), (14.0, 30.0)),
}
# Everything "broad" can draw (competitors see all of it).
FULL_RANGES: dict[str, tuple[float, float]] = {
    "scale": (0.3, 3.0), "color_shift": (-180.0, 180.0), "occlusion": (0.0, 0.55),
    "clutter": (0, 40), "horizon": (0.12, 0.8), "tilt": (-30.0, 30.0),
}
# What a user may ask for explicitly.
VALID_RANGES: dict[str, tuple[float, float]] = {
    "scale": (0.05, 5.0), "color_shift": (-180.0, 180.0), "occlusion": (0.0, 0.9),
    "clutter": (0, 200), "horizon": (0.05, 0.95), "tilt": (-45.0, 45.0),
}
FACTORS: tuple[str, ...] = ("lighting",) + tuple(TRAIN_SLICE)

# Camera: relative focal length (image widths per unit of X/Z) and height above ground, metres.
_F = 0.9
_CAM_H = 1.6


@dataclass(frozen=True)
class SceneConditions:
    """The conditions one scene is rendered under.

    lighting: 'day' | 'dusk' | 'night'.
    scale: object size multiplier (1 = real sizes; tiny < 0.5, huge > 2).
    color_shift: hue rotation of the whole image in degrees (YIQ), -180..180.
    occlusion: share of the frame covered by near occluders (foliage, a close car), 0..0.9.
    clutter: number of cars, people and extra poles in the street.
    horizon: horizon row as a fraction of the image height (camera pitch; 0.45 = level).
    tilt: camera roll in degrees.
    """

    lighting: str = "day"
    scale: float = 1.0
    color_shift: float = 0.0
    occlusion: float = 0.0
    clutter: int = 6
    horizon: float = 0.45
    tilt: float = 0.0

    def __post_init__(self) -> None:
        if self.lighting not in LIGHTINGS:
            raise ValueError(f"lighting: expected one of {list(LIGHTINGS)}, got {self.lighting!r}")
        for name, (lo, hi) in VALID_RANGES.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
                raise ValueError(f"{name}: expected a number in [{lo}, {hi}], got {value!r}")
            if not (lo <= float(value) <= hi):
                raise ValueError(f"{name}: expected a value in [{lo}, {hi}], got {value}")
        object.__setattr__(self, "clutter", int(self.clutter))
        for name in ("scale", "color_shift", "occlusion", "horizon", "tilt"):
            object.__setattr__(self, name, float(getattr(self, name)))

    @property
    def hard_factors(self) -> tuple[str, ...]:
        """Names of the factors outside the target's training slice (`TRAIN_SLICE`, day light)."""
        out = ["lighting"] if self.lighting != "day" else []
        for name, (lo, hi) in TRAIN_SLICE.items():
            if not (lo <= getattr(self, name) <= hi):
                out.append(name)
        return tuple(out)

    @property
    def is_hard(self) -> bool:
        """True when any factor lies outside the target's training slice."""
        return bool(self.hard_factors)

    def to_dict(self) -> dict[str, Any]:
        """Plain dict of the condition fields (JSON/CSV friendly)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "SceneConditions":
        """Inverse of `to_dict`; values may be strings (CSV); keys other than fields are ignored."""
        kwargs: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in d:
                v = d[f.name]
                kwargs[f.name] = v if f.name == "lighting" else (int(float(v)) if f.name == "clutter" else float(v))
        return cls(**kwargs)


@dataclass
class Scene:
    """One rendered scene. image: uint8 [H, W, 3]; mask: uint8 [H, W] (class ids of SCENE_CLASSES)."""

    image: np.ndarray
    mask: np.ndarray
    conditions: SceneConditions
    seed: int


# ----------------------------------------------------------------------------- sampling

def _uniform(rng: np.random.Generator, name: str, lo: float, hi: float) -> float | int:
    if name == "clutter":
        return int(rng.integers(int(lo), int(hi) + 1))
    return float(rng.uniform(lo, hi))


def sample_conditions(
    rng: np.random.Generator, distribution: str, *, hard_fraction: float = POOL_HARD_FRACTION
) -> SceneConditions:
    """Draw scene conditions.

    distribution:
      "train" — the target's narrow slice (day, normal scale, little colour shift, ...);
      "hard"  — the slice with one (70%) or two (30%) factors moved clearly outside it;
      "pool"  — "hard" with probability `hard_fraction` (default 5%), else "train", so that
                target failures are rare in an unlabeled pool;
      "broad" — each factor independently from the slice or from its full range (competitors).
    """
    if not isinstance(rng, np.random.Generator):
        raise ValueError(f"rng: expected a numpy.random.Generator, got {type(rng).__name__}")
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution: expected one of {list(DISTRIBUTIONS)}, got {distribution!r}")
    if not 0.0 <= hard_fraction <= 1.0:
        raise ValueError(f"hard_fraction: expected a value in [0, 1], got {hard_fraction}")
    if distribution == "pool":
        distribution = "hard" if rng.random() < hard_fraction else "train"
    values: dict[str, Any] = {"lighting": "day"}
    for name, (lo, hi) in TRAIN_SLICE.items():
        values[name] = _uniform(rng, name, lo, hi)
    if distribution == "hard":
        k = 1 if rng.random() < 0.7 else 2
        for name in rng.choice(np.array(FACTORS), size=k, replace=False):
            name = str(name)
            if name == "lighting":
                values[name] = str(rng.choice(["dusk", "night"]))
            else:
                ranges = HARD_RANGES[name]
                lo, hi = ranges[int(rng.integers(len(ranges)))]
                values[name] = _uniform(rng, name, lo, hi)
    elif distribution == "broad":
        values["lighting"] = str(rng.choice(list(LIGHTINGS)))
        for name, (lo, hi) in FULL_RANGES.items():
            if rng.random() < 0.5:
                values[name] = _uniform(rng, name, lo, hi)
    return SceneConditions(**values)


# ----------------------------------------------------------------------------- canvas

class _Canvas:
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


def _smooth_noise(rng: np.random.Generator, n: int, cells: int) -> np.ndarray:
    """Bilinearly upsampled Gaussian noise, float32 [n, n], about unit variance, `cells` bumps across."""
    g = rng.standard_normal((cells + 2, cells + 2)).astype(np.float32)
    t = (np.arange(n, dtype=np.float32) + np.float32(0.5)) * np.float32(cells / n)
    i = t.astype(np.int64)
    f = (t - i.astype(np.float32))[:, None]
    rows = g[i] * (1 - f) + g[i + 1] * f              # [n, cells+2]
    fc = f.T
    return rows[:, i] * (1 - fc) + rows[:, i + 1] * fc


def _fast_noise(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Zero-mean, unit-variance noise, float32 (a sum of two uniform bytes: near-Gaussian,
    several times faster than `standard_normal` for the per-pixel texture and sensor noise)."""
    count = int(np.prod(shape))
    b = np.frombuffer(rng.bytes(2 * count), dtype=np.uint8).astype(np.float32)
    return ((b[:count] + b[count:] - 255.0) * np.float32(1 / 104.5)).reshape(shape)


def _jitter(rng: np.random.Generator, color, amount: float = 12.0) -> np.ndarray:
    c = np.asarray(color, np.float32) + rng.uniform(-amount, amount, 3).astype(np.float32)
    return np.minimum(np.maximum(c, 0.0), 255.0)  # np.clip is slow on tiny arrays


_FACADE_COLORS = np.array([[196, 180, 150], [170, 90, 70], [150, 150, 150], [215, 210, 200],
                           [120, 110, 100], [190, 160, 120], [110, 120, 135]], np.float32)
_CAR_COLORS = np.array([[230, 230, 230], [30, 30, 35], [140, 140, 145], [170, 30, 30],
                        [30, 60, 150], [190, 190, 195], [40, 90, 60], [200, 170, 40]], np.float32)
_SIGN_COLORS = np.array([[30, 70, 170], [200, 30, 30], [235, 235, 235]], np.float32)
_SKIN = np.array([[235, 200, 170], [200, 150, 110], [140, 95, 65], [90, 60, 45]], np.float32)
# Texture strength per class: (low-frequency, fine) relative modulation of the albedo.
_TEX_LOW = np.array([0.0, 0.10, 0.08, 0.08, 0.28, 0.05, 0.06, 0.05], np.float32)
_TEX_FINE = np.array([0.01, 0.09, 0.05, 0.05, 0.22, 0.03, 0.06, 0.03], np.float32)


# ----------------------------------------------------------------------------- the street

class _Street:
    """Draws one street on a canvas; all random choices come from one generator, in a fixed order."""

    def __init__(self, cv: _Canvas, c: SceneConditions, rng: np.random.Generator) -> None:
        self.cv, self.c, self.rng = cv, c, rng
        self.hy = c.horizon
        self.vx = 0.5 + rng.uniform(-0.12, 0.12)
        self.xr = rng.uniform(3.0, 6.5)                 # road half width, m
        self.xf = self.xr + rng.uniform(1.8, 4.5)       # facade distance from centre, m
        self.sides = {s: ("buildings" if rng.random() < 0.8 else "park") for s in (-1, 1)}
        self.night_p = {"day": 0.0, "dusk": 0.15, "night": 0.4}[c.lighting]

    # projection helpers
    def sx(self, X: float, Z: float) -> float:
        return self.vx + _F * X / Z

    def sy(self, height: float, Z: float) -> float:
        return self.hy + _F * (_CAM_H - height) / Z

    def lights_on(self) -> bool:
        return self.c.lighting != "day"

    def draw(self) -> None:
        self._sky()
        self._ground()
        self._skyline()
        for s in (-1, 1):
            if self.sides[s] == "buildings":
                self._facade(s)
        for obj in sorted(self._objects(), key=lambda o: -o[0]):
            obj[1]()
        self._occluders()

    def _sky(self) -> None:
        rng = self.rng
        top, bottom = {
            "day": ([70, 130, 210], [185, 210, 235]),
            "dusk": ([50, 45, 110], [250, 150, 80]),
            "night": ([5, 8, 25], [25, 30, 60]),
        }[self.c.lighting]
        t = np.clip(self.cv.ys / max(self.hy, 1e-3), 0, 1)[None]     # [1, n, 1]
        top_c, bottom_c = _jitter(rng, top, 10)[:, None, None], _jitter(rng, bottom, 10)[:, None, None]
        self.sky_color = (top_c * (1 - t) + bottom_c * t).astype(np.float32)   # [3, n, 1]
        self.cloudiness = rng.uniform(0.0, 0.8) if self.c.lighting == "day" else rng.uniform(0, 0.3)

    def _ground(self) -> None:
        """Sky, road (with markings), sidewalk (tiles, curb) and grass, as one lookup per pixel."""
        cv, rng = self.cv, self.rng
        below = cv.ys > self.hy + 1e-4
        dy = np.where(below, cv.ys - self.hy, 1.0)
        Z = _F * _CAM_H / dy                                   # [n, 1] ground depth per row
        X = (cv.xs - self.vx) * (Z / _F)                      # [n, n] lateral position, m
        aX = np.abs(X)
        road_col = _jitter(rng, [95, 95, 100], 12)
        walk_col = _jitter(rng, [175, 165, 160] if rng.random() < 0.7 else [185, 120, 110], 12)
        grass_col = _jitter(rng, [70, 120, 45], 10)
        paint_col = _jitter(rng, [225, 225, 215], 8)
        dash_len = rng.uniform(2.0, 4.0)
        tile = rng.uniform(0.4, 0.8)
        # kinds: 0 sky, 1 road, 2 paint, 3 sidewalk, 4 tile line, 5 curb, 6 grass
        kind = np.where(aX < self.xr, 1, 3).astype(np.int8)
        dashed = np.mod(Z / dash_len, 2.0) < 1.0              # [n, 1]
        kind[((aX < 0.08) & dashed) | (np.abs(aX - self.xr + 0.3) < 0.08)] = 2
        walk = kind == 3
        lines = (np.mod(X / tile, 1.0) < 0.1) | (np.mod(Z / tile, 1.0) < 0.1)
        kind[walk & lines] = 4
        kind[walk & (aX < self.xr + 0.2)] = 5
        for s in (-1, 1):
            if self.sides[s] == "park":
                kind[(kind >= 3) & (s * X >= self.xf)] = 6
        kind[~np.broadcast_to(below, kind.shape)] = 0
        lut = np.stack([np.zeros(3, np.float32), road_col, paint_col, walk_col, walk_col * 0.82,
                        walk_col * 0.7, grass_col]).astype(np.float32)
        cv.albedo[:] = np.take(lut.T, kind, axis=1)
        cv.albedo[:] += (kind == 0)[None] * self.sky_color
        cv.mask[:] = np.array([SKY, ROAD, ROAD, SIDEWALK, SIDEWALK, SIDEWALK, VEGETATION], np.uint8)[kind]

    def _skyline(self) -> None:
        """Distant buildings (and a few tree clumps) across the horizon, drawn per column."""
        cv, rng = self.cv, self.rng
        k = 64
        widths = rng.uniform(0.03, 0.09, k)
        heights = rng.uniform(0.01, 0.10, k)
        tree = rng.random(k) < 0.25
        cols = np.where(tree[:, None], [110.0, 125.0, 85.0], [150.0, 155.0, 170.0]) + rng.uniform(-15, 15, (k, 3))
        far = rng.uniform(0.45, 0.75)
        haze = self.sky_color[:, max(0, min(int(self.hy * cv.size + cv.off), cv.n - 1)), 0]
        cols = (cols * far + haze * (1 - far)).astype(np.float32)
        starts = -0.6 + np.concatenate([[0.0], np.cumsum(widths)[:-1]])
        x = cv.xs[0]
        idx = np.clip(np.searchsorted(starts, x, side="right") - 1, 0, k - 1)
        u = (x - starts[idx]) / widths[idx]               # position within its chunk, 0..1
        h = heights[idx] * np.where(tree[idx], np.sqrt(np.clip(1 - (2 * u - 1) ** 2, 0, 1)), 1.0)
        base = self.hy + 0.004
        region = (cv.ys >= base - h[None, :]) & (cv.ys < base)
        rr, cc = np.nonzero(region)
        cv.albedo[:, rr, cc] = cols[idx[cc]].T
        cv.mask[rr, cc] = np.where(tree[idx[cc]], VEGETATION, BUILDING).astype(np.uint8)

    def _facade(self, s: int) -> None:
        cv, rng = self.cv, self.rng
        zs, ze = rng.uniform(2.0, 8.0), rng.uniform(40.0, 120.0)
        nb = 24
        lengths = rng.uniform(6.0, 18.0, nb)
        heights = rng.uniform(6.0, 26.0, nb)
        cols = _FACADE_COLORS[rng.integers(len(_FACADE_COLORS), size=nb)] + rng.uniform(-15, 15, (nb, 3)).astype(np.float32)
        win_w = rng.uniform(1.2, 2.5, nb)                     # window period along the facade, m
        win_col = _jitter(rng, [60, 75, 95], 12)
        lit_seed = int(rng.integers(1 << 30))
        ends = zs + np.cumsum(lengths)
        dx = s * (cv.xs[0] - self.vx)                        # [n]
        with np.errstate(divide="ignore"):
            Zc = np.where(dx > 1e-4, _F * self.xf / np.maximum(dx, 1e-4), np.inf)
        valid = (Zc >= zs) & (Zc <= min(ze, ends[-1]))
        if not valid.any():
            return
        jv = np.nonzero(valid)[0]
        j0, j1 = int(jv[0]), int(jv[-1]) + 1               # Z is monotonic in x: one column range
        Zv = Zc[j0:j1]
        blk = np.minimum(np.searchsorted(ends, Zv), nb - 1)
        Hb = heights[blk]
        ytop = self.hy + _F * (_CAM_H - Hb) / Zv
        ybot = self.hy + _F * _CAM_H / Zv
        s_, o_ = cv.size, cv.off
        i0 = max(int(math.floor(float(ytop.min()) * s_ + o_)), 0)
        i1 = min(int(math.ceil(float(ybot.max()) * s_ + o_)) + 1, cv.n)
        if i0 >= i1:
            return
        y = cv.ys[i0:i1]                                    # [h, 1]
        region = (y >= ytop[None, :]) & (y < ybot[None, :])  # [h, w]
        Yh = _CAM_H - (y - self.hy) * (Zv / _F)[None, :]     # height on the facade, m
        fz = np.mod(Zv / win_w[blk], 1.0)[None, :]
        fy = np.mod(Yh / np.float32(3.2), np.float32(1.0))
        win = region & (fz > 0.3) & (fz < 0.75) & (fy > 0.35) & (fy < 0.8) & (Yh > 3.0) & (Yh < Hb[None, :] - 1.0)
        # block edges: thin darker seams between buildings
        seam = np.mod(np.searchsorted(ends, Zv * 1.015) - blk, 2).astype(bool)
        colors = (cols[blk] * np.where(seam, 0.7, 1.0)[:, None]).T.astype(np.float32)   # [3, w]
        alb = cv.albedo[:, i0:i1, j0:j1]
        alb[...] = np.where(region[None], colors[:, None, :], alb)
        alb[...] = np.where(win[None], win_col[:, None, None], alb)
        msk = cv.mask[i0:i1, j0:j1]
        msk[region] = BUILDING
        if self.night_p > 0:
            iz = np.floor(Zv / win_w[blk]).astype(np.int64)[None, :]
            iy = np.floor(Yh / np.float32(3.2)).astype(np.int64)
            h = (iz * 73856093) ^ (iy * 19349663) ^ lit_seed
            lit = win & ((h % 1000) < self.night_p * 1000)
            g = cv.glow[:, i0:i1, j0:j1]
            g[...] = np.where(lit[None], np.array([204, 172, 112], np.float32)[:, None, None], g)

    # -- objects ------------------------------------------------------------------------
    def _objects(self) -> list[tuple[float, Callable[[], None]]]:
        rng, c = self.rng, self.c
        objs: list[tuple[float, Callable[[], None]]] = []
        for s in (-1, 1):
            park = self.sides[s] == "park"
            z = rng.uniform(3.0, 10.0)
            gap = (5.0, 10.0) if park else (9.0, 20.0)
            while z < 70:
                if park or rng.random() < 0.5:
                    X = s * (self.xf + rng.uniform(0.5, 3.0)) if park else s * (self.xr + 0.8)
                    objs.append(self._tree(X, z))
                z += rng.uniform(*gap)
            z = rng.uniform(6.0, 25.0)
            while z < 50:
                objs.append(self._pole(s * (self.xr + 0.4), z, lamp=rng.random() < 0.6))
                z += rng.uniform(18.0, 35.0)
        for _ in range(c.clutter):
            u = rng.random()
            if u < 0.45:
                parked = rng.random() < 0.4
                lane = int(rng.choice([-1, 1]))
                X = lane * (self.xr - 1.2) if parked else lane * self.xr / 2 + rng.uniform(-0.3, 0.3)
                objs.append(self._car(X, rng.uniform(5.0, 45.0), facing=(lane < 0 and not parked)))
            elif u < 0.9:
                if rng.random() < 0.12:
                    X = rng.uniform(-self.xr, self.xr)
                else:
                    X = float(rng.choice([-1, 1])) * rng.uniform(self.xr + 0.4, self.xf - 0.3)
                objs.append(self._person(X, rng.uniform(4.0, 20.0)))
            else:
                objs.append(self._pole(float(rng.choice([-1, 1])) * (self.xr + 0.5), rng.uniform(5.0, 30.0),
                                       lamp=False))
        return objs

    def _tree(self, X: float, Z: float):
        rng = self.rng
        k = self.c.scale
        trunk_h, r = rng.uniform(1.8, 3.0) * k, rng.uniform(1.2, 2.8) * k
        col = _jitter(rng, [55, 105, 40], 15)
        trunk_col = _jitter(rng, [80, 60, 45], 10)
        lobes = rng.uniform(-0.6, 0.6, (3, 2))

        def draw() -> None:
            cv, p = self.cv, _F / Z
            x, yb = self.sx(X, Z), self.sy(0.0, Z)
            cv.rect(x - 0.15 * k * p, yb - (trunk_h + r) * p, x + 0.15 * k * p, yb, VEGETATION, trunk_col)
            cy = yb - (trunk_h + r * 0.8) * p
            for i in range(3):
                cv.ellipse(x + lobes[i, 0] * r * p, cy + lobes[i, 1] * r * 0.6 * p, r * p * 0.75, r * p * 0.65,
                           VEGETATION, col * (0.85 + 0.1 * i))
        return Z, draw

    def _pole(self, X: float, Z: float, lamp: bool):
        rng = self.rng
        k = self.c.scale
        h = rng.uniform(5.0, 8.0) * k if lamp else rng.uniform(2.6, 3.4) * k
        col = _jitter(rng, [120, 120, 125], 15)
        sign_col = _SIGN_COLORS[int(rng.integers(len(_SIGN_COLORS)))]
        toward = -1.0 if X > 0 else 1.0

        def draw() -> None:
            cv, p = self.cv, _F / Z
            x, yb = self.sx(X, Z), self.sy(0.0, Z)
            w = 0.12 * k * p
            cv.rect(x - w, yb - h * p, x + w, yb, POLE, col)
            if lamp:
                arm = 1.3 * k * p
                x0, x1 = (x, x + toward * arm) if toward > 0 else (x + toward * arm, x)
                cv.rect(x0, yb - h * p, x1, yb - h * p + 2 * w, POLE, col)
                hx = x + toward * arm
                cv.rect(hx - 2 * w, yb - h * p, hx + 2 * w, yb - h * p + 3 * w, POLE, col,
                        glow=np.array([255, 230, 170], np.float32) if self.lights_on() else None)
                if self.lights_on():
                    cv.glow_spot(hx, yb - h * p + 3 * w, 1.2 * k * p, [90, 80, 55])
            else:
                cv.rect(x - 0.35 * k * p, yb - h * p, x + 0.35 * k * p, yb - (h - 0.7 * k) * p, POLE, sign_col)
        return Z, draw

    def _car(self, X: float, Z: float, facing: bool):
        rng = self.rng
        k = self.c.scale
        bus = rng.random() < 0.12
        w = (rng.uniform(2.4, 2.6) if bus else rng.uniform(1.7, 2.0)) * k
        h = (rng.uniform(2.8, 3.3) if bus else rng.uniform(1.35, 1.6)) * k
        col = _CAR_COLORS[int(rng.integers(len(_CAR_COLORS)))] + rng.uniform(-12, 12, 3).astype(np.float32)
        glass = _jitter(rng, [40, 50, 65], 8)

        def draw() -> None:
            cv, p = self.cv, _F / Z
            x, yb = self.sx(X, Z), self.sy(0.0, Z)
            W, H = w * p, h * p
            dark = np.array([25, 25, 28], np.float32)
            cv.rect(x - 0.45 * W, yb - 0.22 * H, x - 0.22 * W, yb, VEHICLE, dark)      # wheels
            cv.rect(x + 0.22 * W, yb - 0.22 * H, x + 0.45 * W, yb, VEHICLE, dark)
            if bus:
                cv.rect(x - W / 2, yb - H, x + W / 2, yb - 0.12 * H, VEHICLE, np.clip(col, 0, 255))
                cv.rect(x - 0.45 * W, yb - 0.92 * H, x + 0.45 * W, yb - 0.55 * H, VEHICLE, glass)
            else:
                cv.rect(x - W / 2, yb - 0.6 * H, x + W / 2, yb - 0.12 * H, VEHICLE, np.clip(col, 0, 255))
                cv.trapezoid(yb - H, yb - 0.58 * H, x, 0.72 * W, 0.95 * W, VEHICLE, np.clip(col, 0, 255))
                cv.trapezoid(yb - 0.94 * H, yb - 0.64 * H, x, 0.6 * W, 0.8 * W, VEHICLE, glass)
            cv.rect(x - 0.12 * W, yb - 0.3 * H, x + 0.12 * W, yb - 0.2 * H, VEHICLE, [220, 220, 210])  # plate
            lamp = [235, 235, 220] if facing else [200, 20, 20]
            glow = np.array([255, 250, 220] if facing else [255, 40, 30], np.float32) if self.lights_on() else None
            for sgn in (-1, 1):
                x0 = x + sgn * 0.38 * W
                cv.rect(min(x0, x0 + sgn * 0.1 * W), yb - 0.52 * H, max(x0, x0 + sgn * 0.1 * W), yb - 0.42 * H,
                        VEHICLE, lamp, glow=glow)
                if glow is not None:
                    cv.glow_spot(x0, yb - 0.47 * H, 0.15 * W, glow * 0.35)
        return Z, draw

    def _person(self, X: float, Z: float):
        rng = self.rng
        k = self.c.scale
        hp = rng.uniform(1.55, 1.9) * k
        skin = _SKIN[int(rng.integers(len(_SKIN)))]
        shirt = rng.uniform(20, 235, 3).astype(np.float32)
        trousers = rng.uniform(15, 120, 3).astype(np.float32)
        stride = rng.uniform(0.0, 0.12)

        def draw() -> None:
            cv, p = self.cv, _F / Z
            x, yb = self.sx(X, Z), self.sy(0.0, Z)
            H = hp * p
            top = yb - H
            for sgn in (-1, 1):  # legs, apart by the stride
                lx = x + sgn * (0.05 + stride) * H
                cv.rect(lx - 0.045 * H, top + 0.5 * H, lx + 0.045 * H, yb, PERSON, trousers)
            cv.rect(x - 0.2 * H, top + 0.17 * H, x - 0.13 * H, top + 0.5 * H, PERSON, shirt * 0.9)   # arms
            cv.rect(x + 0.13 * H, top + 0.17 * H, x + 0.2 * H, top + 0.5 * H, PERSON, shirt * 0.9)
            cv.trapezoid(top + 0.15 * H, top + 0.55 * H, x, 0.3 * H, 0.24 * H, PERSON, shirt)
            cv.ellipse(x, top + 0.075 * H, 0.065 * H, 0.078 * H, PERSON, skin)
        return Z, draw

    def _occluders(self) -> None:
        """Near foliage from a top corner and a close car/person at the bottom, ~`occlusion` of the frame."""
        o, rng, cv = self.c.occlusion, self.rng, self.cv
        corner = float(rng.choice([0.0, 1.0]))
        col = _jitter(rng, [45, 90, 35], 10)
        lobes = rng.uniform(0, 1, (7, 3))
        near_kind = rng.random()
        near_x = rng.uniform(0.05, 0.35)
        if o < 1e-3:  # nothing to draw (and keeps the near-object depth finite)
            return
        foliage = 0.6 * o
        r = math.sqrt(foliage / (7 * math.pi)) * 1.6
        for i in range(7):
            cx = abs(corner - lobes[i, 0] * r * 2.2)
            cy = lobes[i, 1] * r * 1.4
            cv.ellipse(cx, cy, r * (0.8 + 0.4 * lobes[i, 2]), r * (0.7 + 0.3 * lobes[i, 2]),
                       VEGETATION, col * (0.8 + 0.3 * lobes[i, 2]))
        # a near car / person whose visible area is about the other 40%
        area = 0.4 * o
        side = 1 - corner  # opposite side to the foliage
        cx = abs(side - near_x)
        if near_kind < 0.6:
            w, h = 1.8 * self.c.scale, 1.5 * self.c.scale
            Z = _F * math.sqrt(w * h * 0.8 / area)
            X = (cx - self.vx) * Z / _F
            self._car(X, Z, facing=False)[1]()
        else:
            hp = 1.75 * self.c.scale
            Z = _F * math.sqrt(hp * hp * 0.3 / area)
            X = (cx - self.vx) * Z / _F
            self._person(X, Z)[1]()


# ----------------------------------------------------------------------------- finishing

def _hue_rotation(degrees: float) -> np.ndarray:
    """3×3 matrix rotating hue by `degrees` in YIQ space (keeps luma), applied to RGB rows."""
    t = math.radians(degrees)
    yiq = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]], np.float32)
    rot = np.array([[1, 0, 0], [0, math.cos(t), -math.sin(t)], [0, math.sin(t), math.cos(t)]], np.float32)
    return (np.linalg.inv(yiq) @ rot @ yiq).astype(np.float32)


def _rotate_crop(img: np.ndarray, mask: np.ndarray, size: int, tilt: float) -> tuple[np.ndarray, np.ndarray]:
    """Roll the canvas by `tilt` degrees about its centre and crop the size×size frame.

    img: float32 [3, n, n]; mask: uint8 [n, n]. Nearest-neighbour for both, so every image
    pixel keeps exactly the label of the canvas pixel it came from.
    """
    n = img.shape[1]
    a = math.radians(tilt)
    ca, sa = np.float32(math.cos(a)), np.float32(math.sin(a))
    d = np.arange(size, dtype=np.float32) + np.float32(0.5 - size / 2)
    dy, dx = d[:, None], d[None, :]
    c = np.float32(n / 2)
    sx = np.clip(ca * dx - sa * dy + c, 0, n - 1).astype(np.int64)
    sy = np.clip(sa * dx + ca * dy + c, 0, n - 1).astype(np.int64)
    idx = sy * n + sx
    return img.reshape(3, -1).take(idx, axis=1), mask.reshape(-1).take(idx)


def render_scene(
    seed: int,
    size: int = 128,
    conditions: SceneConditions | None = None,
    *,
    distribution: str = "broad",
) -> Scene:
    """Render one labelled street scene, deterministic per (seed, size, conditions).

    seed: non-negative int. size: output side in pixels (16..2048).
    conditions: fixed conditions; None draws them with `sample_conditions(rng, distribution)`
        from a generator seeded by `seed` (the same stream `generate_scene_set` uses).
    Returns a Scene with image uint8 [size, size, 3] and mask uint8 [size, size] (SCENE_CLASSES ids).
    """
    seed = _check_seed(seed)
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 16 <= size <= 2048:
        raise ValueError(f"size: expected an int in [16, 2048], got {size!r}")
    size = int(size)
    if conditions is None:
        conditions = sample_conditions(np.random.default_rng([seed, 0]), distribution)
    elif not isinstance(conditions, SceneConditions):
        raise ValueError(f"conditions: expected SceneConditions or None, got {type(conditions).__name__}")
    c = conditions
    cv = _Canvas(size, c.tilt)
    street = _Street(cv, c, np.random.default_rng([seed, 1]))
    street.draw()

    tex = np.random.default_rng([seed, 2, size])
    n = cv.n
    low = _smooth_noise(tex, n, 12)
    fine = _fast_noise(tex, (n, n))
    sky = cv.mask == SKY
    gain, tint, noise = {
        "day": (tex.uniform(0.9, 1.1), (1.0, 1.0, 1.0), 2.0),
        "dusk": (tex.uniform(0.45, 0.6), (1.15, 0.85, 0.7), 4.0),
        "night": (tex.uniform(0.13, 0.2), (0.75, 0.85, 1.2), 6.0),
    }[c.lighting]
    # texture modulation and lighting gain per pixel; the sky keeps its own (already lit) colours
    mod = 1.0 + _TEX_LOW[cv.mask] * low + _TEX_FINE[cv.mask] * fine
    img = cv.albedo * mod[None]
    for ch in range(3):
        img[ch] *= np.where(sky, np.float32(1.0), np.float32(gain * tint[ch]))
    cloud_col = {"day": 240.0, "dusk": 200.0, "night": 35.0}[c.lighting]
    if street.cloudiness > 0 and sky.any():  # clouds: where the low-frequency field is high
        amount = np.maximum(low - np.float32(0.3), np.float32(0.0)) * np.float32(street.cloudiness * 0.7) * sky
        img += (np.float32(cloud_col) - img) * np.minimum(amount, np.float32(1.0))[None]
    img += cv.glow
    if c.color_shift != 0.0:
        img = np.tensordot(_hue_rotation(c.color_shift), img, axes=1)
    mask = cv.mask
    if n != size:
        img, mask = _rotate_crop(img, mask, size, c.tilt)
    img += _fast_noise(tex, img.shape) * np.float32(noise)
    np.maximum(img, np.float32(0.0), out=img)
    np.minimum(img, np.float32(255.0), out=img)
    image = np.ascontiguousarray((img + np.float32(0.5)).astype(np.uint8).transpose(1, 2, 0))
    return Scene(image=image, mask=np.ascontiguousarray(mask, dtype=np.uint8), conditions=c, seed=seed)


# ----------------------------------------------------------------------------- sets

def _check_seed(seed: Any, name: str = "seed") -> int:
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"{name}: expected a non-negative int, got {seed!r}")
    return int(seed)


def scene_seeds(n: int, seed: int) -> np.ndarray:
    """Per-scene seeds of a set, int64 [n]; scene i's seed does not depend on n."""
    seed = _check_seed(seed)
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
        raise ValueError(f"n: expected a non-negative int, got {n!r}")
    return np.array([int(np.random.SeedSequence([seed, i]).generate_state(1)[0]) for i in range(int(n))],
                    dtype=np.int64)


def scene_set_conditions(n: int, *, seed: int, distribution: str) -> list[SceneConditions]:
    """Conditions of the scenes `generate_scene_set(n, seed=seed, distribution=...)` renders (no rendering)."""
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution: expected one of {list(DISTRIBUTIONS)}, got {distribution!r}")
    return [sample_conditions(np.random.default_rng([int(s), 0]), distribution) for s in scene_seeds(n, seed)]


def _check_jobs(n_jobs: Any) -> int:
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or n_jobs == 0 or n_jobs < -1:
        raise ValueError(f"n_jobs: expected a positive int or -1 (all cores), got {n_jobs!r}")
    return (os.cpu_count() or 1) if n_jobs == -1 else int(n_jobs)


def _render_chunk(seeds: list[int], size: int, distribution: str) -> list[tuple[np.ndarray, np.ndarray, SceneConditions]]:
    out = []
    for s in seeds:
        sc = render_scene(s, size, distribution=distribution)
        out.append((sc.image, sc.mask, sc.conditions))
    return out


def _write_chunk(items: list[tuple[int, int]], out: str, size: int, distribution: str) -> list[SceneConditions]:
    conds = []
    for i, s in items:
        sc = render_scene(s, size, distribution=distribution)
        _save_png_atomic(sc.image, Path(out) / "images" / f"{_scene_id(i)}.png")
        _save_png_atomic(sc.mask, Path(out) / "masks" / f"{_scene_id(i)}.png")
        conds.append(sc.conditions)
    return conds


def _run_chunks(fn: Callable[..., list], chunks: list[list], args: tuple, n_jobs: int, bar: Any) -> list[list]:
    """fn(chunk, *args) for every chunk, in order; in `n_jobs` processes when > 1 (results are
    identical: every scene depends only on its own seed)."""
    if n_jobs <= 1 or len(chunks) <= 1:
        results = []
        for ch in chunks:
            results.append(fn(ch, *args))
            bar.update(len(ch))
        return results
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # forkserver: workers never inherit a parent's torch/BLAS thread pools mid-use
    with ProcessPoolExecutor(max_workers=n_jobs, mp_context=multiprocessing.get_context("forkserver")) as ex:
        futures = [ex.submit(fn, ch, *args) for ch in chunks]
        try:
            results = []
            for ch, fut in zip(chunks, futures):
                results.append(fut.result())
                bar.update(len(ch))
        except BaseException:  # interrupted: drop queued work; finished files stay (resumable)
            ex.shutdown(wait=False, cancel_futures=True)
            raise
    return results


def _chunked(items: list, n_jobs: int) -> list[list]:
    size = 32 if n_jobs > 1 else max(len(items), 1)
    return [items[i:i + size] for i in range(0, len(items), size)]


def render_scene_arrays(
    n: int, *, seed: int, distribution: str, size: int = 128, progress: bool = False, n_jobs: int = 1
) -> tuple[np.ndarray, np.ndarray, list[SceneConditions]]:
    """Render a set in memory: images uint8 [n, size, size, 3], masks uint8 [n, size, size], conditions.

    Scene i equals scene i of `generate_scene_set(..., seed=seed, distribution=distribution, size=size)`.
    n_jobs: worker processes (-1: all cores); the result does not depend on it.
    """
    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution: expected one of {list(DISTRIBUTIONS)}, got {distribution!r}")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 16 <= size <= 2048:
        raise ValueError(f"size: expected an int in [16, 2048], got {size!r}")
    jobs = _check_jobs(n_jobs)
    seeds = [int(s) for s in scene_seeds(n, seed)]
    images = np.empty((len(seeds), size, size, 3), np.uint8)
    masks = np.empty((len(seeds), size, size), np.uint8)
    conds: list[SceneConditions] = []
    with tqdm(total=len(seeds), desc=f"scenes ({distribution})", disable=not progress, leave=False) as bar:
        results = _run_chunks(_render_chunk, _chunked(seeds, jobs), (int(size), distribution), jobs, bar)
    for i, (img, msk, cond) in enumerate(r for chunk in results for r in chunk):
        images[i], masks[i] = img, msk
        conds.append(cond)
    return images, masks, conds


def _save_png_atomic(arr: np.ndarray, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    Image.fromarray(arr).save(tmp, format="PNG")
    os.replace(tmp, path)


def _scene_id(i: int) -> str:
    return f"scene_{i:06d}"


CONDITIONS_CSV = "conditions.csv"


def generate_scene_set(
    out_dir: str | Path,
    n: int,
    *,
    seed: int,
    distribution: str,
    size: int = 128,
    progress: bool = True,
    n_jobs: int = 1,
) -> "SegmentationSet":
    """Write a labelled scene set and return it as a SegmentationSet.

    Writes `out_dir/images/<id>.png` (RGB), `out_dir/masks/<id>.png` (index PNG, SCENE_CLASSES ids)
    and `out_dir/conditions.csv` (id, seed, every condition field, is_hard, hard_factors).
    ids are `scene_000000`, ... Resumable: scenes whose image and mask already exist are skipped
    (files are written atomically), so an interrupted run continues where it stopped.
    n_jobs: worker processes (-1: all cores); the files do not depend on it.
    """
    from blindspots.data.segsets import SegmentationSet

    if distribution not in DISTRIBUTIONS:
        raise ValueError(f"distribution: expected one of {list(DISTRIBUTIONS)}, got {distribution!r}")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or not 16 <= size <= 2048:
        raise ValueError(f"size: expected an int in [16, 2048], got {size!r}")
    jobs = _check_jobs(n_jobs)
    out = Path(out_dir)
    (out / "images").mkdir(parents=True, exist_ok=True)
    (out / "masks").mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in scene_seeds(n, seed)]
    todo = [(i, s) for i, s in enumerate(seeds)
            if not ((out / "images" / f"{_scene_id(i)}.png").exists() and (out / "masks" / f"{_scene_id(i)}.png").exists())]
    if len(todo) < len(seeds):
        logger.info("generate_scene_set: %d of %d scenes already on disk, kept", len(seeds) - len(todo), len(seeds))
    with tqdm(total=len(seeds), initial=len(seeds) - len(todo), desc=f"scenes ({distribution})",
              disable=not progress) as bar:
        _run_chunks(_write_chunk, _chunked(todo, jobs), (str(out), int(size), distribution), jobs, bar)
    rows = []
    for i, s in enumerate(seeds):
        cond = sample_conditions(np.random.default_rng([s, 0]), distribution)  # cheap; same draw as rendering
        rows.append({"id": _scene_id(i), "seed": s, **cond.to_dict(), "is_hard": cond.is_hard,
                     "hard_factors": "|".join(cond.hard_factors)})
    tmp = out / (CONDITIONS_CSV + ".tmp")
    with open(tmp, "w", newline="") as fh:
        names = ["id", "seed"] + [f.name for f in fields(SceneConditions)] + ["is_hard", "hard_factors"]
        writer = csv.DictWriter(fh, fieldnames=names)
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, out / CONDITIONS_CSV)
    return SegmentationSet(out / "images", out / "masks", classes=SCENE_CLASSES)


def read_conditions(set_dir: str | Path) -> dict[str, SceneConditions]:
    """id -> SceneConditions from a set's conditions.csv."""
    path = Path(set_dir) / CONDITIONS_CSV
    if not path.is_file():
        raise ValueError(f"set_dir: expected a folder with {CONDITIONS_CSV}, got {str(set_dir)!r}")
    with open(path, newline="") as fh:
        return {row["id"]: SceneConditions.from_dict(row) for row in csv.DictReader(fh)}
