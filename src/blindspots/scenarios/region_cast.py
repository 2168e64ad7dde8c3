"""Colour cast per image, measured region by region against the pool's usual colour of each class.

A hue rotation or colour cast turns the chroma of every region by the same angle, but the whole
image's mean chroma mixes regions of different hue (sky, plants, road) that partly cancel, so its
direction follows the content as much as the cast. Here each region is compared with itself: for
every class k of the target's argmax map, the mean chroma c_k (YIQ I + iQ, a complex number) of the
pixels the target calls k is compared with the pool's usual chroma r_k of that class (the median
over the images where k covers enough pixels). The estimated cast is the direction of

    z = sum_k n_k * c_k * conj(r_k)

(n_k pixels of class k): each term points along the angle from r_k to c_k, i.e. the rotation of that
region, weighted by its size and by how coloured the class usually is (grey regions such as road
carry no hue and get little weight). `cast_cos` = cos(angle z), `cast_sin` = sin(angle z): an image
in its usual colours has cast ~ (1, 0); a rotation by +θ gives (cos θ, sin θ), whatever the content.
"""
from __future__ import annotations

import numpy as np
from PIL import Image

REGION_ATTRIBUTES = ("cast_cos", "cast_sin")
MIN_REGION_PIXELS = 16  # a class region smaller than this does not vote for the pool's reference colour


def region_chroma(image: np.ndarray, labels: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 [H, W, 3] image and int [H, W] class map -> (complex128 [K] mean YIQ chroma I + iQ of the
    pixels of each class (0 where absent), int64 [K] pixel count of each class)."""
    img = np.asarray(image)
    lab = np.asarray(labels)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"image: expected uint8 [H, W, 3], got shape {img.shape}")
    if lab.shape != img.shape[:2]:
        raise ValueError(f"labels: expected a class map of the image's size {img.shape[:2]}, got shape {lab.shape}")
    x = img.astype(np.float64) / 255.0
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    chroma = (0.596 * r - 0.274 * g - 0.322 * b) + 1j * (0.211 * r - 0.523 * g + 0.312 * b)
    flat = np.clip(lab.reshape(-1).astype(np.int64), 0, num_classes - 1)
    counts = np.bincount(flat, minlength=num_classes)
    sums = (np.bincount(flat, weights=chroma.real.reshape(-1), minlength=num_classes)
            + 1j * np.bincount(flat, weights=chroma.imag.reshape(-1), minlength=num_classes))
    return np.where(counts > 0, sums / np.maximum(counts, 1), 0.0), counts


def cast_attributes(means: np.ndarray, counts: np.ndarray) -> dict[str, np.ndarray]:
    """Per-image region chroma complex [N, K] and pixel counts int [N, K] (rows of `region_chroma`;
    a row of zero counts for an image without a map) -> {'cast_cos', 'cast_sin'}: float64 [N] each,
    NaN for images without a map or without any region of a class with a usual colour."""
    means = np.asarray(means, dtype=np.complex128)
    counts = np.asarray(counts, dtype=np.float64)
    if means.shape != counts.shape or means.ndim != 2:
        raise ValueError(f"means, counts: expected the same shape [N, K], got {means.shape} and {counts.shape}")
    present = counts >= MIN_REGION_PIXELS
    ref = np.zeros(means.shape[1], dtype=np.complex128)
    for k in range(means.shape[1]):  # the median is robust to the shifted images in the pool
        if present[:, k].any():
            ref[k] = np.median(means[present[:, k], k].real) + 1j * np.median(means[present[:, k], k].imag)
    z = (counts * means * np.conj(ref)[None]).sum(axis=1)
    ok = np.abs(z) > 1e-12
    angle = np.angle(z)
    return {"cast_cos": np.where(ok, np.cos(angle), np.nan), "cast_sin": np.where(ok, np.sin(angle), np.nan)}


class RegionCast:
    """Collects region chroma image by image for one or more models' maps, then gives the cast.

    n_images: rows; num_classes: K of the maps; models: whose maps delimit the regions. With
    several models each gives its own cast (against its own pool reference) and the directions are
    averaged (sum of unit vectors).
    """

    def __init__(self, n_images: int, num_classes: int, models: list[str]):
        self.models = list(models)
        self.num_classes = int(num_classes)
        self.means = {m: np.zeros((n_images, self.num_classes), dtype=np.complex128) for m in self.models}
        self.counts = {m: np.zeros((n_images, self.num_classes), dtype=np.int64) for m in self.models}

    def add(self, row: int, model: str, image: np.ndarray, labels: np.ndarray) -> None:
        """Record image uint8 [H, W, 3] (resized to the map's size when they differ: scans may
        resize before inference) under `model`'s class map int [h, w] at `row`."""
        img = np.asarray(image)
        if img.ndim == 2:
            img = np.repeat(img[..., None], 3, axis=2)
        img = img[..., :3]
        lab = np.asarray(labels)
        if img.shape[:2] != lab.shape:
            img = np.asarray(Image.fromarray(img.astype(np.uint8)).resize((lab.shape[1], lab.shape[0]),
                                                                         Image.BILINEAR))
        self.means[model][row], self.counts[model][row] = region_chroma(img, lab, self.num_classes)

    def attributes(self) -> dict[str, np.ndarray]:
        """{'cast_cos', 'cast_sin'}: float64 [n_images] each (NaN where no model's map gave a cast)."""
        total = 0.0
        for m in self.models:
            c = cast_attributes(self.means[m], self.counts[m])
            total = total + np.nan_to_num(c["cast_cos"]) + 1j * np.nan_to_num(c["cast_sin"])
        total = np.asarray(total, dtype=np.complex128)
        if total.ndim == 0:  # no model
            total = np.zeros(len(next(iter(self.means.values()), np.zeros(0))), dtype=np.complex128)
        ok = np.abs(total) > 1e-12
        angle = np.angle(total)
        return {"cast_cos": np.where(ok, np.cos(angle), np.nan), "cast_sin": np.where(ok, np.sin(angle), np.nan)}
