"""Unbiased test sets T(i+1) ⊂ M(i+1), the Table 1 leaderboard and ranking stability
(paper Section 4.1 "Model evaluation" and Appendix C).

Public API (stable):
- `main_foreground_class(table, models, *, background=(0,)) -> pandas.Series[int]` (id ->
  class id of the largest foreground class by the models' consensus pixel fraction; -1: none).
- `build_test_set(candidates, *, main_class, out_of_domain=(), exclude=(), size=30,
  max_per_class=4, seed=0) -> DataFrame[id, main_class, reason]`.
- `per_image_confusions(pred, target, num_classes, *, ignore_index=255) -> int64 [N, C, C]`.
- `miou_from_confusion(cm) -> float`.
- `leaderboard(results, *, target=None, competitors=None) -> DataFrame` (Table 1 layout) and
  `format_leaderboard(df, digits=4) -> str`.
- `ranking_stability(confusions, *, ks=None, reference_k=None, n_repeats=1, seed=0)
  -> DataFrame[k, srcc, srcc_std]` (Appendix C: SRCC of top-k rankings vs the largest k).
"""
from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd
from scipy.stats import spearmanr

from blindspots.metrics import mean_iou, per_image_confusion
from blindspots.mine.samplers.base import check_table, dumps_reason, usable_mask
from blindspots.data.classes import DEFAULT_IGNORE_INDEX


def main_foreground_class(table: pd.DataFrame, models: Sequence[str], *, background: Iterable[int] = (0,),
                          class_ids: Sequence[int] | None = None) -> pd.Series:
    """The main foreground object of each image, by consensus of several models' predictions.

    Averages `frac__{M}__{k}` over `models` (use the target and every competitor, so no single
    model decides) and takes the largest non-background class.
    Returns int64 Series indexed by id; -1 where no foreground class has any pixel.
    """
    if not models:
        raise ValueError("models: expected at least one model name, got none")
    check_table(table, [])
    bg = {int(b) for b in background}
    if class_ids is None:
        prefix = f"frac__{models[0]}__"
        class_ids = sorted(int(str(c)[len(prefix):]) for c in table.columns if str(c).startswith(prefix))
    fg = [k for k in class_ids if k not in bg]
    if not fg:
        raise ValueError(f"background: expected some classes outside {sorted(bg)}, got classes {list(class_ids)}")
    check_table(table, [f"frac__{m}__{k}" for m in models for k in fg])
    mean = np.zeros((len(table), len(fg)), dtype=np.float64)
    for m in models:
        mean += np.stack([table[f"frac__{m}__{k}"].to_numpy(np.float64, na_value=0.0) for k in fg], axis=1)
    mean /= len(models)
    best = np.asarray(fg, dtype=np.int64)[mean.argmax(axis=1)]
    best[mean.max(axis=1) <= 0] = -1
    return pd.Series(best, index=table["id"].to_numpy(dtype=object), name="main_class")


def build_test_set(candidates: pd.DataFrame | Sequence[str], *, main_class: Mapping[str, int] | pd.Series,
                   out_of_domain: Iterable[str] = (), exclude: Iterable[str] = (), size: int = 30,
                   max_per_class: int = 4, seed: int = 0) -> pd.DataFrame:
    """T(i+1) ⊂ M(i+1) as in the paper's Section 4.1 (defaults: size 30, at most 4 per class).

    candidates: M(i+1), a selection DataFrame with `id` (status-'ok' rows only, if it has a
        status column) or a sequence of ids.
    main_class: id -> main foreground class id (e.g. `main_foreground_class`, or human
        labels); ids with class -1 (no foreground) or missing are not eligible.
    out_of_domain: ids any rater flagged out-of-domain (excluded).
    exclude: ids used to fine-tune the target, i.e. every S(j) so far (excluded).
    seed: the eligible candidates are visited in a seeded random order, so T is not biased
        toward the largest discrepancies; same seed, same T.
    Returns DataFrame [id, main_class, reason] of at most `size` rows.
    """
    if isinstance(candidates, pd.DataFrame):
        check_table(candidates, [], name="candidates")
        ids = candidates["id"].to_numpy(dtype=object)[usable_mask(candidates)]
    else:
        ids = np.asarray(list(candidates), dtype=object)
    for name, v in (("size", size), ("max_per_class", max_per_class)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ValueError(f"{name}: expected an integer >= 1, got {v!r}")
    ids = list(dict.fromkeys(str(i) for i in ids))  # de-duplicate, keep order
    mc = main_class.to_dict() if isinstance(main_class, pd.Series) else dict(main_class)
    ood, used = {str(i) for i in out_of_domain}, {str(i) for i in exclude}
    eligible = [i for i in ids if i not in ood and i not in used and int(mc.get(i, -1)) >= 0]
    order = np.random.default_rng(seed).permutation(len(eligible))
    per_class: dict[int, int] = {}
    picked, classes = [], []
    for j in order:
        i = eligible[j]
        k = int(mc[i])
        if per_class.get(k, 0) >= max_per_class:
            continue
        per_class[k] = per_class.get(k, 0) + 1
        picked.append(i)
        classes.append(k)
        if len(picked) >= size:
            break
    reasons = [dumps_reason({"main_class": k, "seed": int(seed)}) for k in classes]
    return pd.DataFrame({"id": np.asarray(picked, dtype=object), "main_class": np.asarray(classes, dtype=np.int64),
                         "reason": reasons})


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


def leaderboard(results: Mapping[str, Mapping[Any, float]], *, target: str | Sequence[str] | None = None,
                competitors: Sequence[str] | None = None) -> pd.DataFrame:
    """Table 1: every model's mIoU on T0 and on each T(i).

    results: model -> {test set: mIoU}; test-set keys are strings ("T0", "T1") or tuples
        (round, test set), e.g. ("round 0", "T1"), which give grouped (MultiIndex) columns.
        For the target, use one row per version or key its columns by round as in Table 1.
    target: the target's row name(s) (listed last, role "target"); competitors: row order
        for the rest (default: sorted).
    Returns DataFrame indexed by model with a `role` column then one column per test set
    (NaN where a model was not evaluated on a set).
    """
    if not isinstance(results, Mapping) or not results:
        raise ValueError(f"results: expected a non-empty dict model -> {{test set: mIoU}}, got {type(results).__name__}")
    targets = [] if target is None else ([target] if isinstance(target, str) else list(target))
    missing = [t for t in targets if t not in results]
    if missing:
        raise ValueError(f"target: expected model names in results {sorted(results)}, got {missing}")
    comps = list(competitors) if competitors is not None else sorted(m for m in results if m not in targets)
    cols: list[Any] = []
    for m in results.values():
        for key in m:
            if key not in cols:
                cols.append(key)
    rows = comps + targets
    data = {c: [float(results.get(r, {}).get(c, np.nan)) for r in rows] for c in cols}
    df = pd.DataFrame(data, index=pd.Index(rows, name="model"))
    if cols and all(isinstance(c, tuple) for c in cols):
        df.columns = pd.MultiIndex.from_tuples(cols, names=["round", "test set"])
        df.insert(0, ("", "role"), ["target" if r in targets else "competitor" for r in rows])
    else:
        df.insert(0, "role", ["target" if r in targets else "competitor" for r in rows])
    return df


def format_leaderboard(df: pd.DataFrame, digits: int = 4) -> str:
    """Plain-text rendering of `leaderboard(...)` (mIoU with `digits` decimals)."""
    return df.to_string(float_format=lambda v: f"{v:.{digits}f}", na_rep="—")


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
