"""Per-batch statistics of a model's probabilities and distances between two argmax maps.

The statistics are numpy reductions over the class axis, block by block in the cache, so that the
scan costs little beyond the models' own forward passes.
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
BLOCK_PIXELS = 1 << 14  # pixels per block: C planes of a block and the temporaries stay in the L2 cache


class _Blocks:
    """Scratch buffers of one block ([C, rows, W]) and the per-image accumulators."""

    def __init__(self, c: int, rows: int, w: int) -> None:
        self.buf = np.empty((c, rows, w), dtype=np.float32)  # p + eps, log, p log p
        self.below = np.empty((rows, w), dtype=bool)  # pixels whose argmax is above the channel so far
        self.differs = np.empty((rows, w), dtype=bool)


def _block_stats(pb: np.ndarray, maxp: np.ndarray, idx: np.ndarray, ent: np.ndarray, above: np.ndarray,
                 sc: _Blocks) -> None:
    """One block pb float32 [C, r, W] of one image: max, argmax and per-pixel sum of p log(p + eps)
    into the views maxp, idx, ent [r, W]; adds to above int64 [C + 1] the pixels whose argmax is >= k.

    numpy's max over the class axis is vectorised over the contiguous pixels and several times faster
    than argmax; the argmax is then the number of leading channels below the max, which picks the
    first maximum on ties (as np.argmax does). After channel k, `below` marks the pixels whose
    argmax is > k: a count_nonzero per mask replaces a bincount over the map widened to int64.
    """
    c, r = pb.shape[0], pb.shape[1]
    np.max(pb, axis=0, out=maxp)
    below, differs = sc.below[:r], sc.differs[:r]
    below.fill(True)
    idx.fill(0)
    above[0] += below.size
    for k in range(c - 1):
        np.not_equal(pb[k], maxp, out=differs)
        below &= differs
        np.add(idx, below.view(np.uint8), out=idx)  # bool as uint8 (0/1): a same-type add, 2x faster
        above[k + 1] += np.count_nonzero(below)
    buf = sc.buf[:, :r]
    np.add(pb, ENTROPY_EPS, out=buf)
    np.log(buf, out=buf)
    buf *= pb
    np.sum(buf, axis=0, out=ent)  # in channel order per pixel: the same float32 sums as a whole-image sum


def model_stats(proba: Any) -> ModelStats:
    """proba: float32 [N, C, H, W] probabilities (validated upstream; numpy or torch) -> ModelStats.

    One pass over the probabilities, block by block of rows (BLOCK_PIXELS): each block is read from
    memory once and every statistic is taken while it sits in the cache (measured on a 1.4 MP 8-class
    output: 1.8x faster than whole-batch passes). The numbers are the same bits: the per-pixel values
    are computed alike, and the means run over whole images as before.
    """
    torch = sys.modules.get("torch")  # a tensor implies torch is imported; the scan itself does not import it
    p = proba.detach().cpu().numpy() if torch is not None and isinstance(proba, torch.Tensor) else np.asarray(proba)
    if p.ndim != 4:
        raise ValueError(f"proba: expected shape [N, C, H, W], got {p.shape}")
    p = p.astype(np.float32, copy=False)
    n, c, h, w = p.shape
    maxp = np.empty((n, h, w), dtype=np.float32)
    idx = np.empty((n, h, w), dtype=np.uint8 if c <= 256 else np.int32)
    ent = np.empty((h, w), dtype=np.float32)  # per-pixel sum of p log(p + eps) of one image
    above = np.zeros((n, c + 1), dtype=np.int64)  # above[i, k]: pixels of image i whose argmax is >= k
    entropy = np.empty(n, dtype=np.float32)
    rows = max(1, min(h, BLOCK_PIXELS // max(1, w)))
    scratch = _Blocks(c, rows, w)
    for i in range(n):
        for r in range(0, h, rows):
            _block_stats(p[i, :, r:r + rows], maxp[i, r:r + rows], idx[i, r:r + rows], ent[r:r + rows], above[i],
                         scratch)
        entropy[i] = -ent.mean()
    counts = above[:, :-1] - above[:, 1:]
    return ModelStats(
        argmax=idx,
        frac=(counts / float(h * w)).astype(np.float32),
        entropy=entropy,
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
