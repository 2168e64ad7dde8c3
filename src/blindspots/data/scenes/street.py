"""The street painter: one-point perspective, far-to-near, every random choice from one generator."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np

from blindspots.data.scenes.canvas import Canvas, jitter
from blindspots.data.scenes.conditions import (BUILDING, PERSON, POLE, ROAD, SIDEWALK, SKY, VEGETATION, VEHICLE,
                                               SceneConditions)

# Camera: relative focal length (image widths per unit of X/Z) and height above ground, metres.
FOCAL = 0.9
CAMERA_HEIGHT = 1.6

_FACADE_COLORS = np.array([[196, 180, 150], [170, 90, 70], [150, 150, 150], [215, 210, 200],
                           [120, 110, 100], [190, 160, 120], [110, 120, 135]], np.float32)
_CAR_COLORS = np.array([[230, 230, 230], [30, 30, 35], [140, 140, 145], [170, 30, 30],
                        [30, 60, 150], [190, 190, 195], [40, 90, 60], [200, 170, 40]], np.float32)
_SIGN_COLORS = np.array([[30, 70, 170], [200, 30, 30], [235, 235, 235]], np.float32)
_SKIN = np.array([[235, 200, 170], [200, 150, 110], [140, 95, 65], [90, 60, 45]], np.float32)
# Texture strength per class: (low-frequency, fine) relative modulation of the albedo.
TEX_LOW = np.array([0.0, 0.10, 0.08, 0.08, 0.28, 0.05, 0.06, 0.05], np.float32)
TEX_FINE = np.array([0.01, 0.09, 0.05, 0.05, 0.22, 0.03, 0.06, 0.03], np.float32)


class Street:
    """Draws one street on a canvas; all random choices come from one generator, in a fixed order."""

    def __init__(self, cv: Canvas, c: SceneConditions, rng: np.random.Generator) -> None:
        self.cv, self.c, self.rng = cv, c, rng
        self.hy = c.horizon
        self.vx = 0.5 + rng.uniform(-0.12, 0.12)
        self.xr = rng.uniform(3.0, 6.5)                 # road half width, m
        self.xf = self.xr + rng.uniform(1.8, 4.5)       # facade distance from centre, m
        self.sides = {s: ("buildings" if rng.random() < 0.8 else "park") for s in (-1, 1)}
        self.night_p = {"day": 0.0, "dusk": 0.15, "night": 0.4}[c.lighting]

    # projection helpers
    def sx(self, X: float, Z: float) -> float:
        return self.vx + FOCAL * X / Z

    def sy(self, height: float, Z: float) -> float:
        return self.hy + FOCAL * (CAMERA_HEIGHT - height) / Z

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
        top_c, bottom_c = jitter(rng, top, 10)[:, None, None], jitter(rng, bottom, 10)[:, None, None]
        self.sky_color = (top_c * (1 - t) + bottom_c * t).astype(np.float32)   # [3, n, 1]
        self.cloudiness = rng.uniform(0.0, 0.8) if self.c.lighting == "day" else rng.uniform(0, 0.3)

    def _ground(self) -> None:
        """Sky, road (with markings), sidewalk (tiles, curb) and grass, as one lookup per pixel."""
        cv, rng = self.cv, self.rng
        below = cv.ys > self.hy + 1e-4
        dy = np.where(below, cv.ys - self.hy, 1.0)
        Z = FOCAL * CAMERA_HEIGHT / dy                                   # [n, 1] ground depth per row
        X = (cv.xs - self.vx) * (Z / FOCAL)                      # [n, n] lateral position, m
        aX = np.abs(X)
        road_col = jitter(rng, [95, 95, 100], 12)
        walk_col = jitter(rng, [175, 165, 160] if rng.random() < 0.7 else [185, 120, 110], 12)
        grass_col = jitter(rng, [70, 120, 45], 10)
        paint_col = jitter(rng, [225, 225, 215], 8)
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
        win_col = jitter(rng, [60, 75, 95], 12)
        lit_seed = int(rng.integers(1 << 30))
        ends = zs + np.cumsum(lengths)
        dx = s * (cv.xs[0] - self.vx)                        # [n]
        with np.errstate(divide="ignore"):
            Zc = np.where(dx > 1e-4, FOCAL * self.xf / np.maximum(dx, 1e-4), np.inf)
        valid = (Zc >= zs) & (Zc <= min(ze, ends[-1]))
        if not valid.any():
            return
        jv = np.nonzero(valid)[0]
        j0, j1 = int(jv[0]), int(jv[-1]) + 1               # Z is monotonic in x: one column range
        Zv = Zc[j0:j1]
        blk = np.minimum(np.searchsorted(ends, Zv), nb - 1)
        Hb = heights[blk]
        ytop = self.hy + FOCAL * (CAMERA_HEIGHT - Hb) / Zv
        ybot = self.hy + FOCAL * CAMERA_HEIGHT / Zv
        s_, o_ = cv.size, cv.off
        i0 = max(int(math.floor(float(ytop.min()) * s_ + o_)), 0)
        i1 = min(int(math.ceil(float(ybot.max()) * s_ + o_)) + 1, cv.n)
        if i0 >= i1:
            return
        y = cv.ys[i0:i1]                                    # [h, 1]
        region = (y >= ytop[None, :]) & (y < ybot[None, :])  # [h, w]
        Yh = CAMERA_HEIGHT - (y - self.hy) * (Zv / FOCAL)[None, :]     # height on the facade, m
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
        col = jitter(rng, [55, 105, 40], 15)
        trunk_col = jitter(rng, [80, 60, 45], 10)
        lobes = rng.uniform(-0.6, 0.6, (3, 2))

        def draw() -> None:
            cv, p = self.cv, FOCAL / Z
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
        col = jitter(rng, [120, 120, 125], 15)
        sign_col = _SIGN_COLORS[int(rng.integers(len(_SIGN_COLORS)))]
        toward = -1.0 if X > 0 else 1.0

        def draw() -> None:
            cv, p = self.cv, FOCAL / Z
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
        glass = jitter(rng, [40, 50, 65], 8)

        def draw() -> None:
            cv, p = self.cv, FOCAL / Z
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
            cv, p = self.cv, FOCAL / Z
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
        col = jitter(rng, [45, 90, 35], 10)
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
            Z = FOCAL * math.sqrt(w * h * 0.8 / area)
            X = (cx - self.vx) * Z / FOCAL
            self._car(X, Z, facing=False)[1]()
        else:
            hp = 1.75 * self.c.scale
            Z = FOCAL * math.sqrt(hp * hp * 0.3 / area)
            X = (cx - self.vx) * Z / FOCAL
            self._person(X, Z)[1]()

