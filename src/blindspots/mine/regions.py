"""Region queries: which superpixels of an image to ask people about, instead of a whole mask.

Active learning for segmentation asks for less than a mask: a class for a superpixel ("Revisiting
Superpixels for Active Learning in Semantic Segmentation with Realistic Annotation Costs", Lile Cai,
Xun Xu, Jun Hao Liew, Chuan Sheng Foo, CVPR 2021), a few pixels ("All you need are a few pixels:
semantic segmentation with PixelPick", Gyungin Shin, Weidi Xie, Samuel Albanie, ICCV 2021,
arXiv:2104.06394). Here the regions are ranked by what the loop knows of the target's failures: the
share of a region's pixels where the target disagrees with its competitors, and the target's
uncertainty there (one minus its margin between the two most probable classes). Both lie in [0, 1]; a
region's score is their mean over its pixels, averaged.

`confident_labels` marks the pixels every model labels alike with probability >= a threshold: the
"confident" fill mode takes the target's label there instead of leaving them out of the loss.

Public API: `region_segments(image) -> int32 [H, W]`, `rank_regions(segments, target_proba,
competitor_maps, k) -> list[RegionQuery]`, `confident_labels(probas, threshold) -> uint8 [H, W]`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from blindspots._validation import check_int, check_number
from blindspots.data.superpixels import slic_segments

__all__ = ["PIXELS_PER_REGION", "RegionQuery", "region_segments", "rank_regions", "confident_labels"]

#: pixels per region: ~32 x 32, large enough for one glance to name its class, small enough that
#: most regions hold one class (the label editor's brush segments are 8 x 8 px, too small to ask about)
PIXELS_PER_REGION = 1024


@dataclass(frozen=True)
class RegionQuery:
    """One region to ask about: its id in the segments map, the target's guess (its majority class
    there), the ranking score and its two parts (disagreement, uncertainty; each a mean in [0, 1]),
    and its size in pixels."""

    region: int
    guess: int
    score: float
    disagreement: float
    uncertainty: float
    pixels: int


def region_segments(image: np.ndarray, pixels_per_region: int = PIXELS_PER_REGION, *,
                    min_regions: int = 2) -> np.ndarray:
    """SLIC superpixels of uint8 [H, W, 3] sized for region questions -> int32 [H, W] ids 0..n-1 (square
    blocks of that size where SLIC finds under a quarter of the segments asked for).

    min_regions: ask for at least this many (a small image is cut finer, so that K questions do not
    cover all of it).
    """
    check_int(pixels_per_region, "pixels_per_region", minimum=16)
    check_int(min_regions, "min_regions", minimum=1)
    h, w = np.asarray(image).shape[:2]
    n = max(2, min_regions, h * w // pixels_per_region)
    pixels_per_region = max(1, h * w // n)
    seg = slic_segments(image, n_segments=n)
    if seg.max() + 1 >= max(2, n // 4):
        return seg
    # SLIC merges everything on noise-like texture (colour distance swamps the spatial term): ask about
    # square blocks of the same size instead, so every image still gets questions of one size.
    side = max(1, int(round(pixels_per_region ** 0.5)))
    rows, cols = np.arange(h) // side, np.arange(w) // side
    return (rows[:, None] * (cols[-1] + 1) + cols[None, :]).astype(np.int32)


def _region_means(segments: np.ndarray, values: np.ndarray, n: int) -> np.ndarray:
    """Mean of float [H, W] `values` over each region id 0..n-1 of `segments` -> float64 [n]."""
    counts = np.bincount(segments.ravel(), minlength=n).astype(np.float64)
    sums = np.bincount(segments.ravel(), weights=values.ravel().astype(np.float64), minlength=n)
    return np.divide(sums, counts, out=np.zeros(n), where=counts > 0)


def rank_regions(segments: np.ndarray, target_proba: np.ndarray, competitor_maps: Sequence[np.ndarray],
                 k: int) -> list[RegionQuery]:
    """The k regions to ask about, highest score first (ties: the lower region id first).

    segments: int [H, W] region ids 0..n-1. target_proba: float [C, H, W], the target's class
    probabilities. competitor_maps: int [H, W] argmax maps of the competitors (may be empty: then the
    score is the uncertainty alone). k: how many regions (fewer if the image has fewer).
    """
    seg = np.asarray(segments)
    proba = np.asarray(target_proba, dtype=np.float32)
    if seg.ndim != 2 or not np.issubdtype(seg.dtype, np.integer) or seg.size == 0 or seg.min() < 0:
        raise ValueError(f"segments: expected non-negative int region ids [H, W], got {seg.dtype} {seg.shape}")
    if proba.ndim != 3 or proba.shape[1:] != seg.shape or proba.shape[0] < 2:
        raise ValueError(f"target_proba: expected float [C >= 2, H, W] = [C, {seg.shape[0]}, {seg.shape[1]}], "
                         f"got {proba.shape}")
    k = check_int(k, "k", minimum=1)
    maps = [np.asarray(m) for m in competitor_maps]
    for j, m in enumerate(maps):
        if m.shape != seg.shape:
            raise ValueError(f"competitor_maps[{j}]: expected an [H, W] = {seg.shape} map, got {m.shape}")
    n = int(seg.max()) + 1
    guess_map = proba.argmax(0)
    top2 = np.sort(proba, axis=0)[-2:]
    uncertainty = 1.0 - (top2[1] - top2[0])  # 1 - margin: 0 when sure, 1 when torn between two classes
    if maps:
        disagreement = np.mean([m != guess_map for m in maps], axis=0)
    else:
        disagreement = np.zeros(seg.shape, dtype=np.float32)
    d = _region_means(seg, disagreement, n)
    u = _region_means(seg, uncertainty, n)
    pixels = np.bincount(seg.ravel(), minlength=n)
    # The guess: the target's majority class in the region, one bincount over (region, class) pairs.
    c = proba.shape[0]
    votes = np.bincount(seg.ravel() * c + guess_map.ravel(), minlength=n * c).reshape(n, c)
    guesses = votes.argmax(1)
    score = (d + u) / 2
    present = np.flatnonzero(pixels > 0)
    order = present[np.lexsort((present, -score[present]))][:k]
    return [RegionQuery(int(r), int(guesses[r]), float(score[r]), float(d[r]), float(u[r]), int(pixels[r]))
            for r in order]


def confident_labels(probas: Sequence[np.ndarray], threshold: float = 0.9, *,
                     ignore_index: int = 255) -> np.ndarray:
    """uint8 [H, W]: the class every model gives a pixel, where all agree and each is at least `threshold`
    sure of it; `ignore_index` elsewhere.

    probas: float [C, H, W] per model, the target first (at least one; all of one shape).
    """
    check_number(threshold, "threshold", low=0, high=1)
    ps = [np.asarray(p, dtype=np.float32) for p in probas]
    if not ps or ps[0].ndim != 3:
        raise ValueError(f"probas: expected at least one float [C, H, W] array, got "
                         f"{[p.shape for p in ps] if ps else 'none'}")
    for j, p in enumerate(ps):
        if p.shape != ps[0].shape:
            raise ValueError(f"probas[{j}]: expected shape {ps[0].shape} (the target's), got {p.shape}")
    label = ps[0].argmax(0)
    ok = np.ones(label.shape, dtype=bool)
    for p in ps:
        ok &= (p.argmax(0) == label) & (p.max(0) >= threshold)
    return np.where(ok, label, ignore_index).astype(np.uint8)
