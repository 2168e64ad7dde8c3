"""Group flagged pixels into connected, typed issue regions a reviewer can look at as objects.

A region is a connected component (8-connectivity by default) of flagged pixels that share one given
label and one predicted class, with a type:

- "missing"     possibly missing object: the annotation says background (or nothing: ignore_index)
                where the model confidently predicts an object class;
- "spurious"    possibly spurious object: an object is annotated where the model predicts background;
- "wrong_class" possibly wrong class: both are objects (or both background classes) but differ.

Its score is the mean predicted probability of the given label over the region (lower = more likely
wrong; for regions in ignored areas, 1 - mean probability of the predicted class), and its bounding
box is (x0, y0, x1, y1) with exclusive x1, y1.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
from scipy import ndimage
from blindspots.data.classes import DEFAULT_IGNORE_INDEX


KINDS = ("missing", "wrong_class", "spurious")
COLUMNS = ["image", "region", "kind", "given_label", "predicted_label", "area", "x0", "y0", "x1", "y1",
           "score", "confidence"]


@dataclass(frozen=True)
class IssueRegion:
    """One connected issue region of one image."""

    image: int
    region: int
    kind: str
    given_label: int
    predicted_label: int
    area: int
    x0: int
    y0: int
    x1: int
    y1: int
    score: float
    confidence: float


def region_kind(given: int, predicted: int, background: frozenset[int], ignore_index: int | None) -> str:
    """Type of a region from its given label and predicted class."""
    given_bg = given in background or (ignore_index is not None and given == ignore_index)
    pred_bg = predicted in background
    if given_bg and not pred_bg:
        return "missing"
    if pred_bg and not given_bg:
        return "spurious"
    return "wrong_class"


def image_regions(issues: np.ndarray, labels: np.ndarray, pred: np.ndarray, score: np.ndarray,
                  maxprob: np.ndarray, *, image: int = 0, background: Sequence[int] = (0,),
                  ignore_index: int | None = DEFAULT_IGNORE_INDEX, min_area: int = 1, connectivity: int = 2,
                  ignored_thresholds: np.ndarray | None = None) -> list[IssueRegion]:
    """Regions of one image.

    issues: bool [H, W]; labels: int [H, W]; pred: int [H, W] (argmax); score: float [H, W] (probability
    of the given label); maxprob: float [H, W] (probability of pred). ignored_thresholds: float [K] or
    None; when given, ignored pixels predicted as an object class k with probability >= thresholds[k]
    also form "missing" regions (find_label_issues never flags ignored pixels).
    """
    bg = frozenset(int(b) for b in background)
    structure = ndimage.generate_binary_structure(2, connectivity)
    out: list[IssueRegion] = []
    cand = [issues.astype(bool, copy=False)]
    if ignored_thresholds is not None and ignore_index is not None:
        thr = np.asarray(ignored_thresholds, dtype=np.float64)
        ign = labels == ignore_index
        pred_c = np.minimum(pred, len(thr) - 1)
        obj = ~np.isin(pred, list(bg)) if bg else np.ones(pred.shape, bool)
        cand.append(ign & obj & (maxprob >= thr[pred_c]) & ~issues)
    for mask in cand:
        if not mask.any():
            continue
        g, p = labels[mask].astype(np.int64), pred[mask].astype(np.int64)
        for gv, pv in np.unique(np.stack([g, p], axis=1), axis=0):
            sub = mask & (labels == gv) & (pred == pv)
            comp, n = ndimage.label(sub, structure=structure)
            if n == 0:
                continue
            idx = np.arange(1, n + 1)
            areas = ndimage.sum_labels(sub, comp, idx).astype(np.int64)
            ignored = ignore_index is not None and gv == ignore_index
            sc = ndimage.mean(score if not ignored else 1.0 - maxprob.astype(np.float64), comp, idx)
            conf = ndimage.mean(maxprob.astype(np.float64), comp, idx)
            slices = ndimage.find_objects(comp)
            kind = region_kind(int(gv), int(pv), bg, ignore_index)
            for j in range(n):
                if areas[j] < min_area:
                    continue
                ys, xs = slices[j]
                out.append(IssueRegion(image, 0, kind, int(gv), int(pv), int(areas[j]), xs.start, ys.start,
                                       xs.stop, ys.stop, float(sc[j]), float(conf[j])))
    out.sort(key=lambda r: (r.score, -r.area, r.y0, r.x0))
    return [IssueRegion(**{**asdict(r), "region": i}) for i, r in enumerate(out)]


def regions_frame(regions: Iterable[IssueRegion]) -> pd.DataFrame:
    """IssueRegions -> DataFrame with COLUMNS (one row per region)."""
    rows = [asdict(r) for r in regions]
    return pd.DataFrame(rows, columns=COLUMNS) if rows else pd.DataFrame({c: [] for c in COLUMNS})
