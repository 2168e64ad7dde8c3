"""Per-pixel kernels shared by scoring and filtering: label probability, argmax, downsampling.

All kernels work on one chunk of images at a time so memory stays a few bytes per pixel.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from blindspots.labels._internal.inputs import PROB_ATOL, check_values, report_values

# Lazy imports: numba (its JIT kernels are compiled or loaded by their first call).

#: dtypes the compiled pass reads (others, e.g. float16, take the numpy path)
_COMPILED = (np.dtype(np.float32), np.dtype(np.float64))


class ChunkScan(NamedTuple):
    """Per-pixel statistics of one chunk [b, H, W] (see `scan_chunk`)."""

    score: np.ndarray
    valid: np.ndarray
    pred: np.ndarray | None
    maxprob: np.ndarray | None
    note: str | None  # where probabilities do not sum to 1 (checked chunks only), or None


def scan_chunk(labels: np.ndarray, pred_probs: np.ndarray, ignore_index: int | None, *, need_pred: bool,
               check: bool, start: int = 0, atol: float = PROB_ATOL, score: np.ndarray | None = None,
               row_step: int = 1, describe: bool = True) -> ChunkScan:
    """Label probability, labelled mask and (need_pred) argmax/max of a chunk in one read of pred_probs.

    labels: int [b, H, W]; pred_probs: float [b, K, H, W]; score: optional output [b, H, W] of
    pred_probs' dtype. check: validate values (`inputs.report_values`: raises for invalid input) of
    every `row_step`-th image row, and the label's probability of every pixel; `note` then says where
    probabilities do not sum to 1 (when `describe`; else a short note). Labels that are neither class
    ids nor ignore_index always raise.
    """
    if np.dtype(pred_probs.dtype) in _COMPILED:
        from blindspots.labels._internal.kernels import scan

        sc, valid, pred, maxprob, counts = scan(labels, pred_probs, ignore_index, check=check, need_pred=need_pred,
                                                atol=atol, score=score, row_step=row_step)
        note = None
        if counts[0] or counts[1] or (counts[2] and describe):  # rare: locate the first one with numpy
            note = _locate(labels, pred_probs, ignore_index, start, atol, row_step)
        elif counts[2]:
            note = "rows off 1"  # the caller has warned already
        return ChunkScan(sc, valid, pred, maxprob, note)
    note = check_values(labels, pred_probs, ignore_index, start, atol) if check else None
    if not check:  # out-of-range labels would index out of bounds below
        report_values((_first_bad_label(labels, pred_probs.shape[1], ignore_index), -1, -1, -1), labels,
                      pred_probs, ignore_index, start, atol)
    valid = np.ones(labels.shape, dtype=bool) if ignore_index is None else labels != ignore_index
    sc = label_probs(labels, pred_probs, valid)
    if score is not None:
        score[...] = sc
        sc = score
    pred = maxprob = None
    if need_pred:
        pred, maxprob = argmax_max(pred_probs)
    return ChunkScan(sc, valid, pred, maxprob, note)


def _locate(labels: np.ndarray, pred_probs: np.ndarray, ignore_index: int | None, start: int, atol: float,
            row_step: int) -> str | None:
    """The first problem in a chunk the compiled pass counted one in (raises, or describes
    unnormalised rows): every value of the checked rows, the label's probability elsewhere."""
    if row_step == 1:
        return check_values(labels, pred_probs, ignore_index, start, atol)
    bad_label = _first_bad_label(labels, pred_probs.shape[1], ignore_index)
    if bad_label >= 0:
        report_values((bad_label, -1, -1, -1), labels, pred_probs, ignore_index, start, atol)
    valid = np.ones(labels.shape, dtype=bool) if ignore_index is None else labels != ignore_index
    s = label_probs(labels, pred_probs, valid)
    rows = np.zeros(labels.shape[1], dtype=bool)
    rows[::row_step] = True
    sums = pred_probs.sum(axis=1, dtype=np.promote_types(pred_probs.dtype, np.float32))
    finite = np.isfinite(sums)
    bad = (~finite | (pred_probs.min(axis=1) < -atol)) & rows[None, :, None]
    bad |= ~((s >= -atol) & np.isfinite(s))
    off = finite & (np.abs(sums - 1.0) > atol) & rows[None, :, None]

    def first(mask: np.ndarray) -> int:
        flat = np.flatnonzero(mask)
        return int(flat[0]) if flat.size else -1

    fb = first(bad)
    non_finite = fb if fb >= 0 and not np.isfinite(sums.ravel()[fb]) else -1
    negative = fb if fb >= 0 and non_finite < 0 else -1
    return report_values((-1, non_finite, negative, first(off)), labels, pred_probs, ignore_index, start, atol)


def _first_bad_label(labels: np.ndarray, k: int, ignore_index: int | None) -> int:
    bad = (labels < 0) | (labels >= k)
    if ignore_index is not None:
        bad &= labels != ignore_index
    flat = np.flatnonzero(bad)
    return int(flat[0]) if flat.size else -1


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
