"""Segmentation metrics: streaming confusion matrix, per-class IoU, mIoU, pixel accuracy.

Everything is numpy and vectorised with `np.bincount` (these run in the scan's hot loop).
Conventions:

- Label maps are integer arrays; class ids are 0..C-1; pixels whose *target* equals
  `ignore_index` (255 by default) are left out of every count.
- Confusion matrices are int64 [C, C] with rows = target (true) class, columns = predicted class.
- IoU of class k = TP / (TP + FP + FN); it is NaN when class k is absent from both the
  prediction and the label (0 / 0), so it never drags a mean down.
- mIoU is the mean IoU over the classes present in the prediction *or* the label (the
  non-NaN entries; the common nan-mean convention, e.g. mmsegmentation's). The MAD paper's
  tables report mIoU over a test set: accumulate one ConfusionMatrix over the set, then
  `mean_iou(cm.compute())` — or `evaluate(segmenter, data, C)`, which does exactly that.
- Matrices computed in shards, batches or on several workers add up exactly
  (`ConfusionMatrix.merge`, torchmetrics' "sum" reduction of states).

This module is the only place these are computed (the scan's distances, simulated raters, test sets,
fine-tuning and zoo evaluation all call it).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from blindspots._validation import check_class_ids, check_ignore_index, check_int, check_label_map, check_same_shape
from blindspots.data.classes import DEFAULT_IGNORE_INDEX

__all__ = [
    "ConfusionMatrix",
    "confusion_matrix",
    "evaluate",
    "iou_per_class",
    "mean_iou",
    "pixel_accuracy",
    "per_image_class_iou",
    "per_image_confusion",
    "per_image_miou",
    "map_distances",
]


# --- validation (the checks live in _validation.py) --------------------------------------------

def _check_num_classes(num_classes: int) -> int:
    return check_int(num_classes, "num_classes")  # type: ignore[return-value]


def _check_pair(pred: np.ndarray, target: np.ndarray, min_ndim: int = 2,
                names: tuple[str, str] = ("pred", "target")) -> tuple[np.ndarray, np.ndarray]:
    pred = check_label_map(pred, names[0], min_ndim)
    target = check_label_map(target, names[1], min_ndim)
    check_same_shape(pred, target, names)
    return pred, target


# Largest count table the fast path builds (groups × target rows × C); beyond it, mask instead.
_MAX_TABLE = 1 << 26


def _confusion_stack(pred: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int | None,
                     names: tuple[str, str] = ("pred", "target")) -> np.ndarray:
    """Confusion matrices of G groups of pixels. pred, target: int [G, P]. Returns int64 [G, C, C].

    Fast path (the common case): one bincount of `target * C + pred`; ignored pixels (and any
    invalid target value) land in rows >= C, which are checked and sliced off — no masking pass.
    """
    g, c = pred.shape[0], num_classes
    if pred.size == 0:
        return np.zeros((g, c, c), dtype=np.int64)
    p_lo, p_hi = pred.min(), pred.max()
    t_lo, t_hi = target.min(), target.max()
    top = c - 1 if ignore_index is None or ignore_index < 0 else max(c - 1, ignore_index)
    rows = max(c, int(t_hi) + 1)
    if p_lo >= 0 and p_hi < c and t_lo >= 0 and t_hi <= top and g * rows * c <= _MAX_TABLE:
        idx = target.astype(np.intp)
        idx *= c
        idx += pred
        if g > 1:
            idx += (np.arange(g, dtype=np.intp) * (rows * c))[:, None]
        counts = np.bincount(idx.ravel(), minlength=g * rows * c).reshape(g, rows, c)
        if rows > c:
            seen = np.flatnonzero(counts[:, c:].sum(axis=(0, 2))) + c
            bad = seen[seen != ignore_index]
            if bad.size:
                extra = f" or {ignore_index} (ignore_index)" if ignore_index is not None else ""
                raise ValueError(f"{names[1]}: expected class ids in 0..{c - 1}{extra}, "
                                 f"got values {bad[:5].tolist()}")
        return np.ascontiguousarray(counts[:, :c])
    # Slow path: out-of-range values somewhere. Report them, or count only the non-ignored pixels
    # (a prediction may hold anything under ignored pixels).
    check_class_ids(target, names[1], c, ignore_index)
    keep = None if ignore_index is None else target != ignore_index
    check_class_ids(pred if keep is None else pred[keep], names[0], c)
    group = np.broadcast_to(np.arange(g, dtype=np.int64)[:, None], pred.shape)
    if keep is not None:
        pred, target, group = pred[keep], target[keep], group[keep]
    idx = (group * c + target.astype(np.int64)) * c + pred.astype(np.int64)
    return np.bincount(idx.ravel(), minlength=g * c * c).reshape(g, c, c)


# --- confusion matrix --------------------------------------------------------------------------

def confusion_matrix(pred: np.ndarray, target: np.ndarray, num_classes: int,
                     ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> np.ndarray:
    """Confusion matrix of one batch of label maps.

    pred: int [..., H, W] predicted class ids 0..C-1.
    target: int [..., H, W] true class ids 0..C-1 or `ignore_index` (those pixels are skipped).
    Returns int64 [C, C], rows = target, columns = pred.
    """
    num_classes = _check_num_classes(num_classes)
    ignore_index = check_ignore_index(ignore_index, num_classes)
    pred, target = _check_pair(pred, target)
    return _confusion_stack(pred.reshape(1, -1), target.reshape(1, -1), num_classes, ignore_index)[0]


class ConfusionMatrix:
    """Streaming confusion matrix (torchmetrics-style `update` / `compute` / `reset`).

    num_classes: C. ignore_index: target value of unlabeled pixels (255 by default, as in
    PASCAL VOC); None if every pixel is labelled.

    >>> cm = ConfusionMatrix(3)
    >>> cm.update(pred, target)      # any number of batches, int [..., H, W]
    >>> mean_iou(cm.compute())
    """

    def __init__(self, num_classes: int, ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> None:
        self.num_classes = _check_num_classes(num_classes)
        self.ignore_index = check_ignore_index(ignore_index, self.num_classes)
        self._cm = np.zeros((self.num_classes, self.num_classes), dtype=np.int64)

    def update(self, pred: np.ndarray, target: np.ndarray) -> "ConfusionMatrix":
        """Add one batch. pred, target: int [..., H, W] of the same shape. Returns self."""
        self._cm += confusion_matrix(pred, target, self.num_classes, self.ignore_index)
        return self

    def compute(self) -> np.ndarray:
        """int64 [C, C] (a copy), rows = target, columns = pred."""
        return self._cm.copy()

    def reset(self) -> "ConfusionMatrix":
        self._cm[:] = 0
        return self

    def merge(self, *others: "ConfusionMatrix | np.ndarray") -> "ConfusionMatrix":
        """Add the counts of other matrices (shards, batches, workers) into this one; returns self.

        others: ConfusionMatrix of the same num_classes and ignore_index, or int [C, C] / [N, C, C]
        count arrays (e.g. `per_image_confusion` of a shard). States add up exactly (int64), as
        torchmetrics' `dist_reduce_fx="sum"`: merging shards equals one pass over all pixels.
        """
        for other in others:
            if isinstance(other, ConfusionMatrix):
                if (other.num_classes, other.ignore_index) != (self.num_classes, self.ignore_index):
                    raise ValueError(f"other: expected a ConfusionMatrix(num_classes={self.num_classes}, "
                                     f"ignore_index={self.ignore_index}), got {other!r}")
                self._cm += other._cm
                continue
            counts = np.asarray(other)
            c = self.num_classes
            if counts.shape[-2:] != (c, c) or counts.ndim not in (2, 3) or not np.issubdtype(counts.dtype, np.integer):
                raise ValueError(f"other: expected a ConfusionMatrix or integer counts [C, C] / [N, C, C] with C={c}, "
                                 f"got {counts.dtype} {counts.shape}")
            self._cm += counts.reshape(-1, c, c).sum(axis=0, dtype=np.int64)
        return self

    def iou_per_class(self) -> np.ndarray:
        return iou_per_class(self._cm)

    def mean_iou(self) -> float:
        return mean_iou(self._cm)

    def pixel_accuracy(self) -> float:
        return pixel_accuracy(self._cm)

    def __repr__(self) -> str:
        return (f"ConfusionMatrix(num_classes={self.num_classes}, ignore_index={self.ignore_index}, "
                f"pixels={int(self._cm.sum())})")


# --- scores from a confusion matrix ------------------------------------------------------------

def _check_cm(cm: np.ndarray) -> np.ndarray:
    cm = np.asarray(cm)
    if cm.ndim != 2 or cm.shape[0] != cm.shape[1] or cm.shape[0] == 0:
        raise ValueError(f"cm: expected a square confusion matrix [C, C], got shape {cm.shape}")
    if not (np.issubdtype(cm.dtype, np.integer) or np.issubdtype(cm.dtype, np.floating)):
        raise ValueError(f"cm: expected a numeric matrix, got dtype {cm.dtype}")
    if np.issubdtype(cm.dtype, np.floating) and not (np.isfinite(cm).all() and (cm == np.round(cm)).all()):
        raise ValueError("cm: expected pixel counts (whole numbers), got fractional, NaN or inf entries")
    if (cm < 0).any():
        raise ValueError("cm: expected non-negative counts, got negative entries")
    return cm


def iou_per_class(cm: np.ndarray) -> np.ndarray:
    """Per-class IoU = TP / (TP + FP + FN). cm: int [C, C] (rows = target).

    Returns float64 [C]; NaN for a class absent from both the prediction and the label.
    """
    cm = _check_cm(cm).astype(np.float64)
    tp = np.diag(cm)
    union = cm.sum(axis=0) + cm.sum(axis=1) - tp
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, tp / np.where(union > 0, union, 1.0), np.nan)


def mean_iou(cm: np.ndarray) -> float:
    """Mean IoU over the classes present in the prediction or the label (non-NaN IoUs).

    cm: int [C, C]. Returns NaN if the matrix counts no pixel at all.
    """
    iou = iou_per_class(cm)
    present = ~np.isnan(iou)
    return float(iou[present].mean()) if present.any() else float("nan")


def pixel_accuracy(cm: np.ndarray) -> float:
    """Fraction of counted (non-ignored) pixels predicted correctly. NaN if no pixel was counted."""
    cm = _check_cm(cm)
    total = cm.sum()
    return float(np.trace(cm) / total) if total > 0 else float("nan")


# --- per-image scores --------------------------------------------------------------------------

def _per_image_counts(pred: np.ndarray, target: np.ndarray, num_classes: int, ignore_index: int | None,
                      names: tuple[str, str] = ("pred", "target")) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(intersection, pred count, target count), each int64 [N, C], over non-ignored pixels."""
    n = pred.shape[0]
    cms = _confusion_stack(pred.reshape(n, -1), target.reshape(n, -1), num_classes, ignore_index, names)
    return np.diagonal(cms, axis1=1, axis2=2), cms.sum(axis=1), cms.sum(axis=2)


def _check_batch(pred: np.ndarray, target: np.ndarray, names: tuple[str, str]) -> tuple[np.ndarray, np.ndarray]:
    for name, arr in zip(names, (pred, target)):
        if np.ndim(arr) != 3:
            raise ValueError(f"{name}: expected shape [N, H, W], got {np.shape(arr)}")
    pred, target = _check_pair(pred, target, min_ndim=3, names=names)
    if pred.shape[0] == 0 or pred.shape[1] == 0 or pred.shape[2] == 0:
        raise ValueError(f"{names[0]}: expected at least one image of at least one pixel, got shape {pred.shape}")
    return pred, target


def per_image_confusion(pred: np.ndarray, target: np.ndarray, num_classes: int,
                        ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> np.ndarray:
    """Confusion matrix of every image. pred: int [N, H, W] class ids 0..C-1; target: int [N, H, W]
    class ids or `ignore_index` (skipped). Returns int64 [N, C, C], rows = target, columns = pred."""
    num_classes = _check_num_classes(num_classes)
    ignore_index = check_ignore_index(ignore_index, num_classes)
    pred, target = _check_batch(pred, target, ("pred", "target"))
    n = pred.shape[0]
    return _confusion_stack(pred.reshape(n, -1), target.reshape(n, -1), num_classes, ignore_index)


def _mean_present_iou(inter: np.ndarray, union: np.ndarray) -> np.ndarray:
    """Mean IoU per row over the classes with a non-empty union: int [N, C] x2 -> float64 [N] (NaN: none)."""
    present = union > 0
    iou = np.where(present, inter / np.maximum(union, 1), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return iou.sum(axis=1) / present.sum(axis=1)


def per_image_miou(pred: np.ndarray, target: np.ndarray, num_classes: int,
                   ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> np.ndarray:
    """mIoU of every image over the classes present in its prediction or label (ignored pixels excluded).

    pred: int [N, H, W] class ids 0..C-1; target: int [N, H, W] class ids or `ignore_index`.
    Returns float64 [N]; NaN for an image without a labelled pixel.
    """
    num_classes = _check_num_classes(num_classes)
    ignore_index = check_ignore_index(ignore_index, num_classes)
    pred, target = _check_batch(pred, target, ("pred", "target"))
    inter, n_pred, n_true = _per_image_counts(pred, target, num_classes, ignore_index)
    return _mean_present_iou(inter, n_pred + n_true - inter)


def per_image_class_iou(pred: np.ndarray, target: np.ndarray, num_classes: int,
                        ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> np.ndarray:
    """IoU of every class in every image.

    pred: int [N, H, W] class ids 0..C-1; target: int [N, H, W] class ids or `ignore_index`.
    Returns float64 [N, C]; NaN where the class is absent from both pred and target of that image
    (ignored pixels excluded).
    """
    num_classes = _check_num_classes(num_classes)
    ignore_index = check_ignore_index(ignore_index, num_classes)
    pred, target = _check_batch(pred, target, ("pred", "target"))
    inter, n_pred, n_true = _per_image_counts(pred, target, num_classes, ignore_index)
    union = n_pred + n_true - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / np.maximum(union, 1), np.nan)


def map_distances(a: np.ndarray, b: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-image distances between two label maps (the MAD paper's d(f_t(x), g_j(x))).

    a, b: int [N, H, W] class ids 0..C-1 (e.g. the argmax maps of two models).
    Returns (d_pixel, d_miou), each float64 [N]: 1 − pixel agreement, and 1 − mIoU of the two
    maps over the classes present in either map. Both are symmetric in (a, b) and 0 iff a == b.
    """
    num_classes = _check_num_classes(num_classes)
    a, b = _check_batch(a, b, ("a", "b"))
    inter, n_a, n_b = _per_image_counts(a, b, num_classes, None, ("a", "b"))
    pixels = a.shape[1] * a.shape[2]
    d_pixel = 1.0 - inter.sum(axis=1) / pixels
    d_miou = 1.0 - _mean_present_iou(inter, n_a + n_b - inter)  # every image has a class: never NaN
    return d_pixel.astype(np.float64), d_miou.astype(np.float64)


# --- evaluation of a model on a labelled set ---------------------------------------------------

def evaluate(model: Any, data: Any, num_classes: int, *, ignore_index: int | None = DEFAULT_IGNORE_INDEX,
             batch_size: int = 8) -> ConfusionMatrix:
    """One confusion matrix of a model over a labelled set (pixels pooled over the set, VOC's protocol).

    model: a Segmenter (`predict_proba(uint8 [N, H, W, 3]) -> [N, C, H, W]`, argmax taken) or a callable
        uint8 [N, H, W, 3] -> int [N, H, W] predicted labels.
    data: `len()` and `[i] -> (image uint8 [H, W, 3], mask int [H, W])`; checked by the caller.
    Images of different sizes are run one size group at a time (groups in order of first appearance,
    `batch_size` images per call), so the batches are those the training code has always used.
    """
    predict: Callable[[np.ndarray], np.ndarray] = (
        (lambda x: np.asarray(model.predict_proba(x)).argmax(1)) if hasattr(model, "predict_proba") else model)
    cm = ConfusionMatrix(num_classes, ignore_index)
    groups: dict[tuple[int, ...], list[tuple[np.ndarray, np.ndarray]]] = {}
    for i in range(len(data)):
        im, mk = data[i]
        groups.setdefault(np.shape(im)[:2], []).append((im, mk))
    for items in groups.values():
        for s in range(0, len(items), batch_size):
            chunk = items[s:s + batch_size]
            pred = predict(np.stack([np.asarray(c[0]) for c in chunk]))
            cm.update(pred, np.stack([np.asarray(c[1]) for c in chunk]).astype(np.int64))
    return cm
