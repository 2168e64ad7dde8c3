"""Shared inputs for the label-issue tests (random and structured probability maps)."""
from __future__ import annotations

import numpy as np
from scipy import ndimage


def random_inputs(rng: np.random.Generator, n: int, k: int, h: int, w: int, dtype=np.float64,
                  label_classes: int | None = None, scale: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """i.i.d. logits -> softmax probabilities; labels uniform over the first `label_classes` classes."""
    logits = rng.normal(size=(n, k, h, w)) * scale
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    labels = rng.integers(0, label_classes or k, size=(n, h, w))
    return labels, p.astype(dtype)


def structured_inputs(rng: np.random.Generator, n: int, k: int, h: int, w: int, dtype=np.float32,
                      noise: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Smooth class fields: labels = argmax of a smooth field with `noise` of the pixels in
    rectangular patches relabelled; probabilities = softmax of a perturbed version of the same field."""
    field = ndimage.gaussian_filter(rng.normal(size=(n, k, h, w)), sigma=(0, 0, max(h / 8, 1), max(w / 8, 1)))
    field /= field.std() + 1e-12
    labels = field.argmax(axis=1)
    for i in range(n):
        for _ in range(max(1, int(noise * 10))):
            y, x = rng.integers(0, h), rng.integers(0, w)
            labels[i, y:y + max(h // 6, 1), x:x + max(w // 6, 1)] = rng.integers(0, k)
    logits = 4 * (field + 0.3 * rng.normal(size=field.shape))
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return labels, p.astype(dtype)
