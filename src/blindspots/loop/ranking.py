"""Ranking stability of Table 1 (MAD paper, Appendix C): the SRCC between the model ranking on the first k
test images and on all of them, from per-image confusion matrices.

Public API: `per_image_confusions(pred, target, num_classes, *, ignore_index=255) -> int64 [N, C, C]`,
`miou_from_confusion(cm) -> float`, `ranking_stability(confusions, *, ks=None, reference_k=None, n_repeats=1,
seed=0) -> DataFrame[k, srcc, srcc_std]`. Not imported by the loop's face (scipy): the round page reads it.
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from blindspots.data.classes import DEFAULT_IGNORE_INDEX
from blindspots.metrics import mean_iou, per_image_confusion


def per_image_confusions(pred: np.ndarray, target: np.ndarray, num_classes: int, *,
                         ignore_index: int | None = DEFAULT_IGNORE_INDEX) -> np.ndarray:
    """Per-image confusion matrices. pred, target: int [N, H, W]. Returns int64 [N, C, C]
    (rows = target, cols = pred); target pixels equal to ignore_index (or outside 0..C-1) are skipped.
    Counted by `metrics.per_image_confusion`."""
    pred, target = np.asarray(pred), np.asarray(target)
    if pred.shape != target.shape or pred.ndim != 3:
        raise ValueError(f"pred, target: expected equal shapes [N, H, W], got {pred.shape} and {target.shape}")
    c = int(num_classes)
    t = target.astype(np.int64)
    valid = (t >= 0) & (t < c) & (t != (ignore_index if ignore_index is not None else -1))
    if pred.size == 0:
        return np.zeros((pred.shape[0], c, c), dtype=np.int64)
    return per_image_confusion(pred.astype(np.int64), np.where(valid, t, c), c, ignore_index=c)


#: mIoU over classes present in the labels or the prediction; cm: int [C, C] (rows = target).
miou_from_confusion = mean_iou


def _srcc(scores: np.ndarray, ref: np.ndarray) -> float:
    """Spearman's rank correlation of two mIoU vectors over the models where both are finite; NaN when fewer
    than two are, or when either ranking is all ties."""
    ok = np.isfinite(scores) & np.isfinite(ref)
    if ok.sum() < 2 or np.ptp(scores[ok]) == 0 or np.ptp(ref[ok]) == 0:
        return float("nan")
    return float(spearmanr(scores[ok], ref[ok]).statistic)


def ranking_stability(confusions: Mapping[str, np.ndarray], *, ks: Sequence[int] | None = None,
                      reference_k: int | None = None, n_repeats: int = 1, seed: int = 0) -> pd.DataFrame:
    """Appendix C: SRCC between the model ranking on k test images and on the reference k.

    confusions: model -> int64 [N, C, C] per-image confusion matrices on the same N test images
        (same order), e.g. from `per_image_confusions`.
    ks: the k values (default: N//2 .. N-1, as the paper's 20..39 for N = 40).
    reference_k: default N (the largest k).
    n_repeats: 1 uses the first k images in the test set's order (the paper); more draws that
        many random image orders (seeded) and averages.
    Returns DataFrame [k, srcc, srcc_std] (srcc over the models whose mIoU is finite at both k; NaN when a
    ranking is constant or fewer than two models have one). The one SRCC rule: the round page's
    `report.viewmodels.ranking.topk_srcc` calls it.
    """
    if len(confusions) < 2:
        raise ValueError(f"confusions: expected at least 2 models to rank, got {len(confusions)}")
    arrays = {m: np.asarray(c) for m, c in confusions.items()}
    shapes = {a.shape for a in arrays.values()}
    if len(shapes) != 1 or next(iter(shapes)).__len__() != 3:
        raise ValueError(f"confusions: expected int [N, C, C] arrays of one shape, got shapes {sorted(shapes)}")
    n = next(iter(shapes))[0]
    ref = n if reference_k is None else int(reference_k)
    if not 1 <= ref <= n:
        raise ValueError(f"reference_k: expected 1..{n}, got {reference_k}")
    ks = list(range(max(1, ref // 2), ref)) if ks is None else [int(k) for k in ks]
    bad = [k for k in ks if not 1 <= k <= n]
    if bad:
        raise ValueError(f"ks: expected values in 1..{n}, got {bad}")
    rng = np.random.default_rng(seed)
    stack = np.stack(list(arrays.values()))  # [M, N, C, C]
    results = {k: [] for k in ks}
    for rep in range(max(1, int(n_repeats))):
        order = np.arange(n) if n_repeats <= 1 else rng.permutation(n)
        cum = np.cumsum(stack[:, order], axis=1)  # [M, N, C, C]: cum[:, k-1] = first k images
        ref_scores = np.array([miou_from_confusion(cum[m, ref - 1]) for m in range(len(stack))])
        for k in ks:
            scores = np.array([miou_from_confusion(cum[m, k - 1]) for m in range(len(stack))])
            results[k].append(_srcc(scores, ref_scores))
    return pd.DataFrame({"k": ks, "srcc": [float(np.nanmean(v)) if not np.all(np.isnan(v)) else np.nan for v in results.values()],
                         "srcc_std": [float(np.nanstd(v)) if not np.all(np.isnan(v)) else np.nan for v in results.values()]})
