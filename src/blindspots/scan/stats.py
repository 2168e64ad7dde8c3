"""Per-batch statistics of a model's probabilities and distances between two argmax maps.

Everything is vectorised over the batch (torch reductions, one bincount per batch) so that
the scan costs little beyond the models' own forward passes.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


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


def model_stats(proba: np.ndarray | torch.Tensor) -> ModelStats:
    """proba: float32 [N, C, H, W] probabilities (validated upstream) -> ModelStats."""
    p = torch.as_tensor(proba)
    if p.ndim != 4:
        raise ValueError(f"proba: expected shape [N, C, H, W], got {tuple(p.shape)}")
    n, c, h, w = p.shape
    maxp, idx = p.max(dim=1)  # one pass gives both the max-probability and the argmax map
    # entr(p) = -p log p with entr(0) = 0, so zero probabilities need no clamping.
    entropy = torch.special.entr(p).sum(dim=1).mean(dim=(1, 2))
    offsets = torch.arange(n, dtype=torch.int64).view(n, 1, 1) * c
    counts = torch.bincount((idx + offsets).view(-1), minlength=n * c).view(n, c)
    frac = counts.to(torch.float32) / float(h * w)
    dtype = torch.uint8 if c <= 256 else torch.int32
    return ModelStats(
        argmax=idx.to(dtype).numpy(),
        frac=frac.numpy(),
        entropy=entropy.to(torch.float32).numpy(),
        maxprob=maxp.mean(dim=(1, 2)).to(torch.float32).numpy(),
    )


def map_confusions(a: np.ndarray, b: np.ndarray, num_classes: int) -> np.ndarray:
    """Per-image confusion matrices of two maps: int [N, H, W] x2 -> int64 [N, C, C] (rows = a)."""
    ta, tb = torch.as_tensor(a).to(torch.int64), torch.as_tensor(b).to(torch.int64)
    if ta.shape != tb.shape or ta.ndim != 3:
        raise ValueError(f"a, b: expected two maps of one shape [N, H, W], got {tuple(ta.shape)} and {tuple(tb.shape)}")
    n, c = ta.shape[0], int(num_classes)
    offsets = torch.arange(n, dtype=torch.int64).view(n, 1, 1) * (c * c)
    flat = (offsets + ta * c + tb).view(-1)
    return torch.bincount(flat, minlength=n * c * c).view(n, c, c).numpy()


def pair_distances(a: np.ndarray, b: np.ndarray, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Distances between two argmax maps, per image (the paper's d(f_t(x), g_j(x)), Eq. 1).

    a, b: int [N, H, W] class ids in [0, C).
    Returns (dpa, dmiou), float64 [N] each: 1 - pixel agreement, and 1 - mIoU where the mean
    runs over the classes present in either map.
    """
    cm = map_confusions(a, b, num_classes).astype(np.float64)
    total = cm.sum(axis=(1, 2))
    inter = np.diagonal(cm, axis1=1, axis2=2)
    union = cm.sum(axis=2) + cm.sum(axis=1) - inter
    present = union > 0
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=present)
    miou = iou.sum(axis=1) / np.maximum(present.sum(axis=1), 1)
    dpa = 1.0 - inter.sum(axis=1) / np.maximum(total, 1)
    return dpa, 1.0 - miou
