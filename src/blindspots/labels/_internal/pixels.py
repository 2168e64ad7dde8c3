"""Per-pixel kernels shared by scoring and filtering: label probability, argmax, downsampling.

All kernels work on one chunk of images at a time so memory stays a few bytes per pixel.
"""
from __future__ import annotations

import numpy as np


def label_probs(labels: np.ndarray, pred_probs: np.ndarray, valid: np.ndarray | None) -> np.ndarray:
    """Predicted probability of the given label ("self-confidence"), the pixel score.

    labels: int [b, H, W]; pred_probs: float [b, K, H, W]; valid: bool [b, H, W] or None (all valid).
    Returns an array of pred_probs' dtype [b, H, W]; invalid (ignored) pixels get 1.0.
    """
    idx = labels if valid is None else np.where(valid, labels, 0)
    if idx.dtype.itemsize > 4 or idx.dtype.kind != "i":
        idx = idx.astype(np.intp, copy=False)
    scores = np.take_along_axis(pred_probs, idx[:, None], axis=1)[:, 0]
    if valid is not None:
        scores[~valid] = 1.0
    return scores


def argmax_max(pred_probs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Argmax (first maximum, like numpy) and maximum over the class axis.

    pred_probs: float [b, K, H, W] -> (pred uint8|uint16 [b, H, W], maxprob float [b, H, W]).
    The max over a middle axis is fast in numpy; argmax is not, so the index is recovered with one
    branch-free pass per class, from the last class to the first so that the lowest tied class wins.
    """
    k = pred_probs.shape[1]
    best = pred_probs.max(axis=1)
    dt = np.uint8 if k < 255 else np.uint16
    pred = np.full(best.shape, k, dtype=dt)
    eq = np.empty(best.shape, dtype=bool)
    for c in range(k - 1, -1, -1):
        np.equal(pred_probs[:, c], best, out=eq)
        pred -= eq.view(np.uint8) * (pred - dt(c))  # pred > c here, so no wrap-around
    return pred, best


def block_majority(labels: np.ndarray, factor: int, num_classes: int, ignore_index: int | None) -> np.ndarray:
    """Majority label of each factor x factor block.

    labels: int [b, H, W] -> same dtype [b, H/factor, W/factor]. Ignored pixels do not vote; a block
    with no labelled pixel is ignored. Ties go to the lowest class id. (cleanlab instead averages the
    class ids and rounds, which can invent a class that is in no pixel of the block.)
    """
    b, h, w = labels.shape
    blocks = labels.reshape(b, h // factor, factor, w // factor, factor)
    best_count = np.zeros((b, h // factor, w // factor), dtype=np.int32)
    fill = ignore_index if ignore_index is not None else 0
    out = np.full(best_count.shape, fill, dtype=labels.dtype)
    present = np.unique(labels)
    for c in present:
        if ignore_index is not None and c == ignore_index:
            continue
        if c < 0 or c >= num_classes:
            continue
        count = (blocks == c).sum(axis=(2, 4), dtype=np.int32)
        better = count > best_count  # present is sorted, so ties keep the lower class id
        out[better] = c
        np.maximum(best_count, count, out=best_count)
    return out


def block_mean_probs(pred_probs: np.ndarray, factor: int) -> np.ndarray:
    """Block-averaged probabilities, renormalised to sum to 1 (as cleanlab does).

    pred_probs: float [b, K, H, W] -> same dtype [b, K, H/factor, W/factor].
    """
    b, k, h, w = pred_probs.shape
    small = pred_probs.reshape(b, k, h // factor, factor, w // factor, factor).mean(axis=(5, 3))
    small /= small.sum(axis=1, keepdims=True)
    return small


def upsample_mask(mask: np.ndarray, factor: int) -> np.ndarray:
    """bool [b, h, w] -> bool [b, h*factor, w*factor] by pixel repetition."""
    if factor == 1:
        return mask
    return mask.repeat(factor, axis=1).repeat(factor, axis=2)


def sortable_key(values: np.ndarray) -> np.ndarray:
    """Top 16 bits of the IEEE bit pattern of max(values, 0): monotone in the value.

    values: float32|float64 [...] -> uint16 [...]; used for exact streaming selection of the k-th
    smallest score without sorting all pixels.
    """
    v = np.maximum(values, 0)
    if v.dtype == np.float32:
        return (v.view(np.uint32) >> 16).astype(np.uint16)
    if v.dtype == np.float64:
        return (v.view(np.uint64) >> 48).astype(np.uint16)
    return sortable_key(v.astype(np.float32))
