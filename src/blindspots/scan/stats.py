"""Per-batch statistics of a model's probabilities and distances between two argmax maps.

Everything is vectorised over the batch (numpy reductions over the class axis, one bincount
per batch) so that the scan costs little beyond the models' own forward passes.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from blindspots.metrics import map_distances


@dataclass
class ModelStats:
    """Statistics of one model on a batch of N images of one size H x W.

    argmax: uint8 (C <= 256, else int32) [N, H, W] — the predicted map.
    frac: float32 [N, C] — pixel fraction of each class in the map.
    entropy: float32 [N] — mean per-pixel entropy of the probabilities, in nats.
    maxprob: float32 [N] — mean per-pixel maximum probability.
    """

    argmax: np.ndarray
    frac: np.ndarray
    entropy: np.ndarray
    maxprob: np.ndarray


ENTROPY_EPS = np.float32(1e-30)  # p log(p + eps) is 0 at p = 0 and equal to p log p (float32) elsewhere


def _max_and_argmax(p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float32 [N, C, H, W] -> (max float32 [N, H, W], argmax [N, H, W]).

    numpy's max over axis 1 is vectorised over the contiguous pixel axes and is several times
    faster than argmax; the argmax is then the number of leading channels below the max, which
    picks the first maximum on ties (as np.argmax does).
    """
    m = p.max(axis=1)
    c = p.shape[1]
    idx = np.zeros(m.shape, dtype=np.uint8 if c <= 256 else np.int32)
    below = np.ones(m.shape, dtype=bool)
    for k in range(c - 1):
        below &= p[:, k] != m
        idx += below
    return m, idx


def _mean_entropy(p: np.ndarray) -> np.ndarray:
    """float32 [N, C, H, W] -> mean per-pixel entropy float32 [N] (nats), one image at a time
    so that the temporary stays in cache."""
    out = np.empty(p.shape[0], dtype=np.float32)
    buf = np.empty(p.shape[1:], dtype=np.float32)
    for i, pi in enumerate(p):
        np.add(pi, ENTROPY_EPS, out=buf)
        np.log(buf, out=buf)
        buf *= pi
        out[i] = -buf.sum(axis=0).mean()
    return out


def model_stats(proba: Any) -> ModelStats:
    """proba: float32 [N, C, H, W] probabilities (validated upstream; numpy or torch) -> ModelStats."""
    torch = sys.modules.get("torch")  # a tensor implies torch is imported; the scan itself does not import it
    p = proba.detach().cpu().numpy() if torch is not None and isinstance(proba, torch.Tensor) else np.asarray(proba)
    if p.ndim != 4:
        raise ValueError(f"proba: expected shape [N, C, H, W], got {p.shape}")
    p = p.astype(np.float32, copy=False)
    n, c, h, w = p.shape
    maxp, idx = _max_and_argmax(p)
    entropy = _mean_entropy(p)
    offsets = (np.arange(n, dtype=np.int64) * c).reshape(n, 1, 1)
    counts = np.bincount((idx + offsets).ravel(), minlength=n * c).reshape(n, c)
    return ModelStats(
        argmax=idx,
        frac=(counts / float(h * w)).astype(np.float32),
        entropy=entropy.astype(np.float32),
        maxprob=maxp.mean(axis=(1, 2), dtype=np.float32),
    )


def pair_distances(a: np.ndarray, b: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Distances between two argmax maps, per image (the paper's d(f_t(x), g_j(x)), Eq. 1).

    a, b: int [N, H, W] class ids in [0, C).
    Returns (dpa, dmiou), float64 [N] each: 1 - pixel agreement, and 1 - mIoU where the mean
    runs over the classes present in either map. Computed by `metrics.map_distances` (the one copy;
    measured 1.2-1.7x faster than the bincount this module had, with identical numbers).
    """
    return map_distances(a, b, num_classes)
