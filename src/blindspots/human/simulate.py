"""Simulated humans for demos, tests and benchmarks: raters that score a candidate from the
*true* IoU of the target's prediction, and annotators that return the ground-truth mask with
optional realistic annotation noise. Only this module reads ground truth; mining never does.

Public API (stable):
- `image_miou(pred, gt, num_classes, *, ignore_index=255) -> float64 [N]`: per-image mIoU over
  the classes present in the prediction or the label (NaN if an image has no labelled pixel).
- `SimulatedRaters(n_raters=3, *, noise=0.5, bias_sd=0.3, ood_share=0.0, ood_sensitivity=1.0,
  names=None, seed=0)`; `.rate(ids, true_iou, *, out_of_domain=None) -> Ratings`.
- `SimulatedAnnotator(*, boundary_px=0, drop_below=0, background=0, ignore_index=255, seed=0)`;
  `.annotate(image_id, mask) -> uint8 [H, W]`.
Every random draw is keyed by (seed, image id[, rater]), so an image gets the same answers
whatever batch it arrives in (rounds can be resumed and re-run).
"""
from __future__ import annotations

import zlib
from typing import Sequence

import numpy as np
from scipy import ndimage

from blindspots._validation import check_int, check_number
from blindspots.human.ratings import OUT_OF_DOMAIN, Ratings
from blindspots.metrics import per_image_miou
from blindspots.data.classes import DEFAULT_IGNORE_INDEX


def _rng(seed: int, *keys: str | int) -> np.random.Generator:
    """A generator keyed by the seed and stable hashes of the keys (order-independent draws)."""
    words = [int(seed) & 0xFFFFFFFF] + [zlib.crc32(str(k).encode()) for k in keys]
    return np.random.default_rng(words)


def image_miou(pred: np.ndarray, gt: np.ndarray, num_classes: int, *,
               ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> np.ndarray:
    """Per-image mIoU of `pred` against `gt` over the classes present in either.

    pred, gt: int [N, H, W] (or [H, W] for one image). Returns float64 [N].
    Pixels where gt == ignore_index are left out.
    """
    pred, gt = np.asarray(pred), np.asarray(gt)
    if pred.shape != gt.shape:
        raise ValueError(f"pred, gt: expected equal shapes, got {pred.shape} and {gt.shape}")
    if pred.ndim == 2:
        pred, gt = pred[None], gt[None]
    if pred.ndim != 3:
        raise ValueError(f"pred: expected int [N, H, W] or [H, W], got shape {pred.shape}")
    c, n = int(num_classes), pred.shape[0]
    if pred.size == 0:
        return np.full(n, np.nan)
    g, p = gt.astype(np.int64), pred.astype(np.int64)
    # pixels this function has always skipped: ignored, or a class id out of range in either map
    valid = (g != (ignore_index if ignore_index is not None else -1)) & (g >= 0) & (g < c) & (p >= 0) & (p < c)
    return per_image_miou(np.where(valid, p, 0), np.where(valid, g, c), c, ignore_index=c)


class SimulatedRaters:
    """A panel of simulated ACR raters.

    Rater r's answer for image x: round(1 + 4 * IoU(x) + b_r + e), clipped to 1..5, where
    b_r ~ N(0, bias_sd) is the rater's fixed bias (lenient or strict) and e ~ N(0, noise) is
    per-rating noise; IoU is the target's true per-image mIoU. Out-of-domain images (given,
    or drawn with probability `ood_share` per image) are flagged by each rater with
    probability `ood_sensitivity`.

    n_raters: panel size (the paper used 3 raters). names: rater names (default sim1..simN).
    """

    def __init__(self, n_raters: int = 3, *, noise: float = 0.5, bias_sd: float = 0.3, ood_share: float = 0.0,
                 ood_sensitivity: float = 1.0, names: Sequence[str] | None = None, seed: int = 0) -> None:
        check_int(n_raters, "n_raters")
        for name, v in (("noise", noise), ("bias_sd", bias_sd)):
            check_number(v, name, low=0)
        for name, v in (("ood_share", ood_share), ("ood_sensitivity", ood_sensitivity)):
            check_number(v, name, low=0, high=1)
        names = [f"sim{i + 1}" for i in range(n_raters)] if names is None else [str(x) for x in names]
        if len(names) != n_raters or len(set(names)) != n_raters:
            raise ValueError(f"names: expected {n_raters} distinct rater names, got {names}")
        self.n_raters, self.noise, self.bias_sd = int(n_raters), float(noise), float(bias_sd)
        self.ood_share, self.ood_sensitivity = float(ood_share), float(ood_sensitivity)
        self.names, self.seed = names, int(seed)
        self.biases_ = np.array([_rng(self.seed, "bias", nm).normal(0.0, self.bias_sd) for nm in names])

    def rate(self, ids: Sequence[str], true_iou: np.ndarray, *, out_of_domain: np.ndarray | None = None,
             ratings: Ratings | None = None) -> Ratings:
        """Rate every image. ids: [N] str; true_iou: float [N] in [0, 1] (NaN: treated as 0);
        out_of_domain: bool [N] ground-truth out-of-domain flags (None: drawn with ood_share).
        ratings: add to this Ratings object (default: a new one). Returns the Ratings."""
        ids = [str(i) for i in ids]
        iou = np.asarray(true_iou, dtype=np.float64)
        if iou.shape != (len(ids),):
            raise ValueError(f"true_iou: expected shape ({len(ids)},) matching ids, got {iou.shape}")
        if np.any(iou[np.isfinite(iou)] < 0) or np.any(iou[np.isfinite(iou)] > 1):
            raise ValueError("true_iou: expected values in [0, 1], got values outside")
        if out_of_domain is not None:
            ood = np.asarray(out_of_domain, dtype=bool)
            if ood.shape != (len(ids),):
                raise ValueError(f"out_of_domain: expected bool shape ({len(ids)},), got {ood.shape}")
        else:
            ood = np.array([_rng(self.seed, "ood", i).random() < self.ood_share for i in ids], dtype=bool)
        out = ratings if ratings is not None else Ratings()
        for j, image_id in enumerate(ids):
            q = 1.0 + 4.0 * (0.0 if not np.isfinite(iou[j]) else iou[j])
            for r, name in enumerate(self.names):
                g = _rng(self.seed, "rate", image_id, name)
                if ood[j] and g.random() < self.ood_sensitivity:
                    out.add(image_id, name, OUT_OF_DOMAIN)
                    continue
                score = int(np.clip(np.rint(q + self.biases_[r] + g.normal(0.0, self.noise)), 1, 5))
                out.add(image_id, name, score)
        return out


def _fill_nearest(mask: np.ndarray, holes: np.ndarray) -> np.ndarray:
    """Give each hole pixel the label of the nearest non-hole pixel."""
    if not holes.any() or holes.all():
        return mask
    _, (iy, ix) = ndimage.distance_transform_edt(holes, return_indices=True)
    out = mask.copy()
    out[holes] = mask[iy[holes], ix[holes]]
    return out


class SimulatedAnnotator:
    """Returns the ground-truth mask, optionally with realistic annotation noise.

    boundary_px: each class region is randomly eroded or dilated by 1..boundary_px pixels
        (sloppy boundaries); 0 = exact.
    drop_below: connected foreground objects smaller than this many pixels are missed and
        take the label around them; 0 = none dropped.
    background: class id never counted as an object for dropping.
    """

    def __init__(self, *, boundary_px: int = 0, drop_below: int = 0, background: int = 0,
                 ignore_index: int | None = DEFAULT_IGNORE_INDEX, seed: int = 0) -> None:
        for name, v in (("boundary_px", boundary_px), ("drop_below", drop_below)):
            check_int(v, name, minimum=0)
        self.boundary_px, self.drop_below = int(boundary_px), int(drop_below)
        self.background, self.ignore_index, self.seed = int(background), ignore_index, int(seed)

    def annotate(self, image_id: str, mask: np.ndarray) -> np.ndarray:
        """mask: int [H, W] ground truth -> uint8 [H, W] annotation (ignore pixels stay ignored)."""
        m = np.asarray(mask)
        if m.ndim != 2:
            raise ValueError(f"mask: expected int [H, W], got shape {m.shape}")
        out = m.astype(np.uint8, copy=True)
        ignore = out == self.ignore_index if self.ignore_index is not None else np.zeros(out.shape, bool)
        rng = _rng(self.seed, "annotate", image_id)
        if self.drop_below > 0:
            holes = np.zeros(out.shape, bool)
            for c in np.unique(out[~ignore]):
                if c == self.background:
                    continue
                lab, num = ndimage.label(out == c)
                if num:
                    sizes = np.bincount(lab.ravel())
                    small = np.flatnonzero(sizes < self.drop_below)
                    small = small[small > 0]
                    holes |= np.isin(lab, small)
            out = _fill_nearest(out, holes | ignore)
            out[ignore] = m[ignore]
        if self.boundary_px > 0:
            for c in rng.permutation(np.unique(out[~ignore])):
                region = out == c
                r = int(rng.integers(1, self.boundary_px + 1))
                if rng.random() < 0.5:
                    grown = ndimage.binary_dilation(region, iterations=r) & ~ignore
                    out[grown] = c
                else:
                    shrunk = ndimage.binary_erosion(region, iterations=r, border_value=1)
                    removed = region & ~shrunk
                    if removed.any() and not (region | ignore).all():
                        out = _fill_nearest(out, removed | ignore)
                        out[ignore] = m[ignore]
        return out
