"""Render one scene: paint the street, texture and light it, shift its colours, roll the camera."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blindspots.data.scenes.canvas import Canvas, fast_noise, smooth_noise
from blindspots._validation import check_seed
from blindspots.data.scenes.conditions import SKY, SceneConditions, check_size, sample_conditions
from blindspots.data.scenes.street import TEX_FINE, TEX_LOW, Street


@dataclass
class Scene:
    """One rendered scene. image: uint8 [H, W, 3]; mask: uint8 [H, W] (class ids of SCENE_CLASSES)."""

    image: np.ndarray
    mask: np.ndarray
    conditions: SceneConditions
    seed: int



def hue_rotation(degrees: float) -> np.ndarray:
    """3×3 matrix rotating hue by `degrees` in YIQ space (keeps luma), applied to RGB rows."""
    t = math.radians(degrees)
    yiq = np.array([[0.299, 0.587, 0.114], [0.596, -0.274, -0.322], [0.211, -0.523, 0.312]], np.float32)
    rot = np.array([[1, 0, 0], [0, math.cos(t), -math.sin(t)], [0, math.sin(t), math.cos(t)]], np.float32)
    return (np.linalg.inv(yiq) @ rot @ yiq).astype(np.float32)


def rotate_crop(img: np.ndarray, mask: np.ndarray, size: int, tilt: float) -> tuple[np.ndarray, np.ndarray]:
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
    seed = check_seed(seed)
    size = check_size(size)
    if conditions is None:
        conditions = sample_conditions(np.random.default_rng([seed, 0]), distribution)
    elif not isinstance(conditions, SceneConditions):
        raise ValueError(f"conditions: expected SceneConditions or None, got {type(conditions).__name__}")
    c = conditions
    cv = Canvas(size, c.tilt)
    street = Street(cv, c, np.random.default_rng([seed, 1]))
    street.draw()

    tex = np.random.default_rng([seed, 2, size])
    n = cv.n
    low = smooth_noise(tex, n, 12)
    fine = fast_noise(tex, (n, n))
    sky = cv.mask == SKY
    gain, tint, noise = {
        "day": (tex.uniform(0.9, 1.1), (1.0, 1.0, 1.0), 2.0),
        "dusk": (tex.uniform(0.45, 0.6), (1.15, 0.85, 0.7), 4.0),
        "night": (tex.uniform(0.13, 0.2), (0.75, 0.85, 1.2), 6.0),
    }[c.lighting]
    # texture modulation and lighting gain per pixel; the sky keeps its own (already lit) colours
    mod = 1.0 + TEX_LOW[cv.mask] * low + TEX_FINE[cv.mask] * fine
    img = cv.albedo * mod[None]
    for ch in range(3):
        img[ch] *= np.where(sky, np.float32(1.0), np.float32(gain * tint[ch]))
    cloud_col = {"day": 240.0, "dusk": 200.0, "night": 35.0}[c.lighting]
    if street.cloudiness > 0 and sky.any():  # clouds: where the low-frequency field is high
        amount = np.maximum(low - np.float32(0.3), np.float32(0.0)) * np.float32(street.cloudiness * 0.7) * sky
        img += (np.float32(cloud_col) - img) * np.minimum(amount, np.float32(1.0))[None]
    img += cv.glow
    if c.color_shift != 0.0:
        img = np.tensordot(hue_rotation(c.color_shift), img, axes=1)
    mask = cv.mask
    if n != size:
        img, mask = rotate_crop(img, mask, size, c.tilt)
    img += fast_noise(tex, img.shape) * np.float32(noise)
    np.maximum(img, np.float32(0.0), out=img)
    np.minimum(img, np.float32(255.0), out=img)
    image = np.ascontiguousarray((img + np.float32(0.5)).astype(np.uint8).transpose(1, 2, 0))
    return Scene(image=image, mask=np.ascontiguousarray(mask, dtype=np.uint8), conditions=c, seed=seed)

