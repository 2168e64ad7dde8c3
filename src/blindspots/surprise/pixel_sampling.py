"""Pixel sampler (paper Section 5.1, Figure 5): which pixels of which images give activation traces.

Fitting: up to ``per_class`` = 100 pixels of each *label* class per image, from up to ``max_images``
= 10,000 training images, then each class capped at ``cap`` = 10,000 traces.
Scoring: up to 1,000 pixels of each *predicted* class per image, or every pixel for a heatmap.
All draws use a numpy Generator built from ``seed``: the same seed gives the same pixels.
"""
from __future__ import annotations

import numpy as np
from blindspots.data.classes import DEFAULT_IGNORE_INDEX

#: The paper's settings (Section 5.1).
FIT_PIXELS_PER_CLASS = 100
FIT_MAX_IMAGES = 10_000
FIT_CAP_PER_CLASS = 10_000
SCORE_PIXELS_PER_CLASS = 1_000


def sample_pixels(mask: np.ndarray, per_class: int | None, rng: np.random.Generator, *,
                  ignore_index: int | None = DEFAULT_IGNORE_INDEX, num_classes: int | None = None
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Sample up to `per_class` pixels of every class present in `mask` (all pixels if None).

    mask: int [H, W] class ids (label map for fitting, predicted map for scoring).
    Returns (flat pixel indices int64 [k] into H*W, their class ids int64 [k]), grouped by class in
    ascending class order; pixels within a class are in ascending index order. Pixels equal to
    `ignore_index` (and ids >= num_classes, if given) are never sampled.
    """
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"mask: expected a 2-D class map [H, W], got shape {mask.shape}")
    if not np.issubdtype(mask.dtype, np.integer):
        raise ValueError(f"mask: expected integer class ids, got dtype {mask.dtype}")
    if per_class is not None and int(per_class) < 1:
        raise ValueError(f"per_class: expected a positive integer or None (all pixels), got {per_class}")
    flat = mask.reshape(-1).astype(np.int64)
    order = np.argsort(flat, kind="stable")
    values, starts, counts = np.unique(flat[order], return_index=True, return_counts=True)
    idx_parts, cls_parts = [], []
    for v, s, k in zip(values, starts, counts):
        if (ignore_index is not None and v == ignore_index) or v < 0 or (num_classes is not None and v >= num_classes):
            continue
        pix = order[s:s + k]
        if per_class is not None and k > per_class:
            pix = np.sort(rng.choice(pix, size=int(per_class), replace=False))
        idx_parts.append(pix)
        cls_parts.append(np.full(pix.size, v, dtype=np.int64))
    if not idx_parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(idx_parts), np.concatenate(cls_parts)


def cap_per_class(labels: np.ndarray, cap: int | None, rng: np.random.Generator) -> np.ndarray:
    """Indices int64 [k] keeping at most `cap` random entries of each class of labels int [n] (sorted)."""
    labels = np.asarray(labels)
    if cap is None:
        return np.arange(labels.size, dtype=np.int64)
    if int(cap) < 1:
        raise ValueError(f"cap: expected a positive integer or None, got {cap}")
    keep = []
    for c in np.unique(labels):
        idx = np.flatnonzero(labels == c)
        if idx.size > cap:
            idx = rng.choice(idx, size=int(cap), replace=False)
        keep.append(idx)
    return np.sort(np.concatenate(keep)).astype(np.int64) if keep else np.zeros(0, dtype=np.int64)


def choose_images(n_images: int, max_images: int | None, rng: np.random.Generator) -> np.ndarray:
    """Indices of up to `max_images` of `n_images` images drawn without replacement (sorted)."""
    if n_images < 1:
        raise ValueError(f"n_images: expected at least one image, got {n_images}")
    if max_images is None or max_images >= n_images:
        return np.arange(n_images, dtype=np.int64)
    if int(max_images) < 1:
        raise ValueError(f"max_images: expected a positive integer or None, got {max_images}")
    return np.sort(rng.choice(n_images, size=int(max_images), replace=False)).astype(np.int64)
