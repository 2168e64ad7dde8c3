"""Summaries of segmentation label issues (cleanlab 2.x `segmentation.summary` compatible).

`common_label_issues` counts (given, predicted) class pairs among flagged pixels, `filter_by_class`
keeps the issues that involve one class, `display_issues` draws the images with most issues.
With verbose=True, `common_label_issues` prints cleanlab's lines on stdout (a drop-in for scripts and
notebooks that show them; library code otherwise only logs).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from blindspots.data.classes import DEFAULT_IGNORE_INDEX, voc_palette
from blindspots.labels._internal.pixels import argmax_max
from blindspots.metrics import ConfusionMatrix

# Lazy imports: matplotlib (the loop's bookkeeping commands start without them).


def _check(issues: Any, labels: Any, pred_probs: Any = None) -> tuple[np.ndarray, np.ndarray]:
    issues, labels = np.asarray(issues), np.asarray(labels)
    if issues.ndim != 3 or issues.dtype != np.bool_:
        raise ValueError(f"issues: expected a bool mask of shape (N, H, W), got {issues.dtype} {issues.shape}")
    if labels.shape != issues.shape:
        raise ValueError(f"labels: expected shape {issues.shape} (as issues), got {labels.shape}")
    if labels.dtype.kind not in "iu":
        raise ValueError(f"labels: expected an integer dtype, got {labels.dtype}")
    if pred_probs is not None:
        shp = np.shape(pred_probs)
        if len(shp) != 4 or (shp[0],) + tuple(shp[2:]) != issues.shape:
            raise ValueError(f"pred_probs: expected shape (N, K, H, W) matching issues {issues.shape}, got {shp}")
    return issues, labels


def _pred_at(pred_probs: Any, i: int) -> np.ndarray:
    """Argmax map int [H, W] of image i (reads one image of a possibly memory-mapped array, or the
    [K, H_i, W_i] item i of a list of images of mixed sizes)."""
    if isinstance(pred_probs, (list, tuple)):
        return argmax_max(np.asarray(pred_probs[i])[None])[0][0]
    return argmax_max(np.asarray(pred_probs[i:i + 1]))[0][0]


def _is_ragged(issues: Any) -> bool:
    """A list/tuple of per-image masks of different sizes (what `find_label_issues` returns for images of
    mixed sizes)."""
    return isinstance(issues, (list, tuple)) and len({np.shape(m) for m in issues}) > 1


def _flagged(issues: Any) -> Iterable[int]:
    """Indices of the images with any flagged pixel: one vectorised pass for an array, per image for
    a list of images of mixed sizes."""
    if isinstance(issues, np.ndarray):
        return np.flatnonzero(issues.reshape(len(issues), -1).any(axis=1)).tolist()
    return [j for j in range(len(issues)) if np.asarray(issues[j]).any()]


def _check_ragged(issues: Any, labels: Any, pred_probs: Any = None) -> tuple[list[np.ndarray], list[np.ndarray] | None]:
    """Images of mixed sizes: issues, labels lists of [H_i, W_i]; pred_probs a list of [K, H_i, W_i]."""
    iss = [np.asarray(m) for m in issues]
    n = len(iss)
    for i, m in enumerate(iss):
        if m.ndim != 2 or m.dtype != np.bool_:
            raise ValueError(f"issues: expected bool masks [H, W] per image, got {m.dtype} {m.shape} at image {i}")
    labs = None
    if labels is not None:
        if not isinstance(labels, (list, tuple)) or len(labels) != n:
            raise ValueError(f"labels: expected a list of {n} int [H, W] arrays (as issues: images of mixed sizes), "
                             f"got {type(labels).__name__} of length {len(labels)}")
        labs = [np.asarray(a) for a in labels]
        for i, (m, a) in enumerate(zip(iss, labs)):
            if a.shape != m.shape or a.dtype.kind not in "iu":
                raise ValueError(f"labels: expected int {m.shape} (as issues) at image {i}, got {a.dtype} {a.shape}")
    if pred_probs is not None:
        if not isinstance(pred_probs, (list, tuple)) or len(pred_probs) != n:
            raise ValueError(f"pred_probs: expected a list of {n} float [K, H, W] arrays (as issues: images of mixed "
                             f"sizes), got {type(pred_probs).__name__} of length {len(pred_probs)}")
        ks = set()
        for i, (m, p) in enumerate(zip(iss, pred_probs)):
            shp = np.shape(p)
            if len(shp) != 3 or tuple(shp[1:]) != m.shape:
                raise ValueError(f"pred_probs: expected [K, {m.shape[0]}, {m.shape[1]}] (as issues) at image {i}, "
                                 f"got {shp}")
            ks.add(shp[0])
        if len(ks) > 1:
            raise ValueError(f"pred_probs: expected the same K for every image, got {sorted(ks)}")
    return iss, labs


def common_label_issues(issues: np.ndarray, labels: np.ndarray, pred_probs: np.ndarray, *,
                        class_names: Sequence[str] | None = None, exclude: Sequence[int] | None = None,
                        top: int | None = None, verbose: bool = True, ignore_index: int | None = DEFAULT_IGNORE_INDEX
                        ) -> pd.DataFrame:
    """DataFrame ['given_label', 'predicted_label', 'num_pixel_issues'] of the `top` (default 20) most
    frequent (given, predicted) pairs among flagged pixels, most frequent first (ties: given then
    predicted class order, as cleanlab).

    issues: bool [N, H, W]; labels: int [N, H, W]; pred_probs: float [N, K, H, W].
    exclude: predicted classes not to count (cleanlab's meaning). Pixels labelled ignore_index are skipped.
    verbose: print one line per row on stdout, as cleanlab does.
    """
    if _is_ragged(issues):
        issues, labels = _check_ragged(issues, labels, pred_probs)  # type: ignore[assignment]
        k = np.shape(pred_probs[0])[0]
    else:
        issues, labels = _check(issues, labels, pred_probs)
        k = np.shape(pred_probs)[1]
    exclude = [] if exclude is None else list(exclude)
    top = 20 if top is None else top
    if class_names is None:
        class_names = [str(i) for i in range(k)]
    cm = ConfusionMatrix(k, ignore_index=None)  # rows = given label, columns = predicted class
    seen = np.zeros(k, dtype=bool)
    for i in _flagged(issues):
        m = issues[i]
        g = labels[i][m].astype(np.int64)
        p = _pred_at(pred_probs, i)[m].astype(np.int64)
        keep = (g >= 0) & (g < k)
        if ignore_index is not None:
            keep &= g != ignore_index
        g, p = g[keep], p[keep]
        seen[np.unique(g)] = True
        p_ok = ~np.isin(p, exclude)
        cm.update(p[p_ok][None], g[p_ok][None])  # [1, P]: one row of flagged pixels
    counts = cm.compute()
    rows = [[class_names[gl], class_names[pl], int(counts[gl, pl])]
            for gl in range(min(k, len(class_names))) if seen[gl]
            for pl in range(k) if counts[gl, pl] > 0]
    rows = sorted(rows, key=lambda r: r[2], reverse=True)[:top]  # stable, like cleanlab
    df = pd.DataFrame(rows, columns=["given_label", "predicted_label", "num_pixel_issues"])
    if verbose:  # cleanlab's words, on stdout: a drop-in prints what cleanlab prints
        for _, r in df.iterrows():
            print(f"Class '{r['given_label']}' is potentially mislabeled as class for '{r['predicted_label']}' "
                  f"{r['num_pixel_issues']} pixels in the dataset")
    return df


def filter_by_class(class_index: int, issues: np.ndarray, labels: np.ndarray, pred_probs: np.ndarray
                    ) -> np.ndarray:
    """Issues bool [N, H, W] whose given label or predicted class is `class_index`.

    A class id that no pixel has (also one outside 0..K-1) gives an all-False mask, as in cleanlab.
    class_index: an int, or a sequence of ints (any of them; cleanlab's np.isin accepts both).
    Images of mixed sizes: lists of [H_i, W_i] issues and labels, [K, H_i, W_i] pred_probs -> a list.
    """
    ragged = _is_ragged(issues)
    if ragged:
        issues, labels = _check_ragged(issues, labels, pred_probs)  # type: ignore[assignment]
    else:
        issues, labels = _check(issues, labels, pred_probs)
    wanted = np.atleast_1d(np.asarray(class_index))
    if isinstance(class_index, (bool, np.bool_)) or wanted.ndim != 1 or (wanted.size and wanted.dtype.kind not in "iu"):
        raise ValueError(f"class_index: expected a class id (int) or a sequence of them, got {class_index!r}")
    out = [m & np.isin(a, wanted) for m, a in zip(issues, labels)] if ragged else issues & np.isin(labels, wanted)
    for i in _flagged(issues):
        out[i] |= issues[i] & np.isin(_pred_at(pred_probs, i), wanted)
    return out


def display_issues(issues: np.ndarray, *, labels: np.ndarray | None = None, pred_probs: np.ndarray | None = None,
                   class_names: Sequence[str] | None = None, exclude: Sequence[int] | None = None,
                   top: int | None = None, palette: np.ndarray | None = None,
                   ignore_index: int | None = DEFAULT_IGNORE_INDEX,
                   show: bool = True, **kwargs: Any) -> Any:
    """Draw the `top` (default 20) images with most flagged pixels: given labels, argmax prediction
    and the flagged pixels in red (columns present when labels / pred_probs are given), in one figure.

    show=True (default): plt.show(**kwargs), then None, as cleanlab (so a notebook cell ending in this
    call shows the figure once); show=False: the matplotlib Figure, not shown.
    palette: uint8 [K, 3] colours (default: VOC); ignored pixels are white.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if _is_ragged(issues):  # images of mixed sizes: lists of per-image arrays
        issues, labels = _check_ragged(issues, labels, pred_probs)  # type: ignore[assignment]
        k_given = np.shape(pred_probs[0])[0] if pred_probs is not None else None
    else:
        issues = np.asarray(issues)
        if issues.ndim != 3 or issues.dtype != np.bool_:
            raise ValueError(f"issues: expected a bool mask of shape (N, H, W), got {issues.dtype} {issues.shape}")
        if labels is not None:
            _check(issues, labels, pred_probs)
            labels = np.asarray(labels)
        elif pred_probs is not None:
            _check(issues, np.zeros(issues.shape, np.int64), pred_probs)
        k_given = np.shape(pred_probs)[1] if pred_probs is not None else None
    exclude = [] if exclude is None else list(exclude)
    if labels is None and exclude:
        raise ValueError("exclude: expected labels to be given when classes are excluded, got labels=None")
    top = min(20 if top is None else top, len(issues))
    order = np.argsort(-np.array([int(m.sum()) for m in issues]), kind="stable")[:top]
    given_max = max((int(a[a != ignore_index].max()) for a in labels if (a != ignore_index).any()), default=0) \
        if labels is not None else 0
    k = k_given if k_given is not None else given_max + 1
    if palette is None:
        palette = voc_palette(max(k, 1))
    palette = np.asarray(palette, dtype=np.uint8)

    def colour(m: np.ndarray) -> np.ndarray:
        out = np.full(m.shape + (3,), 255, np.uint8)
        ok = (m >= 0) & (m < len(palette))
        out[ok] = palette[m[ok]]
        return out

    cols = 1 + (labels is not None) + (pred_probs is not None)
    fig, axes = plt.subplots(max(len(order), 1), cols, figsize=(4 * cols, 4 * max(len(order), 1)), squeeze=False)
    for r, i in enumerate(order):
        c = 0
        if labels is not None:
            axes[r, c].imshow(colour(labels[i]))
            axes[r, c].set_title("Given labels")
            c += 1
        if pred_probs is not None:
            axes[r, c].imshow(colour(_pred_at(pred_probs, i)))
            axes[r, c].set_title("Argmax prediction")
            c += 1
        m = issues[i] & (~np.isin(labels[i], exclude) if labels is not None and exclude else True)
        rgba = np.zeros(m.shape + (4,), np.float32)
        rgba[m] = (1, 0, 0, 1)
        axes[r, c].imshow(rgba)
        axes[r, c].set_title(f"Image {i}: suggested errors (red)")
    for ax in axes.ravel():
        ax.axis("off")
    if class_names is not None:
        fig.legend(handles=[Patch(color=palette[j] / 255.0, label=n) for j, n in enumerate(class_names[:len(palette)])],
                   loc="lower center", ncol=min(len(class_names), 8))
    fig.tight_layout()
    if show:
        plt.show(**kwargs)
        return None
    return fig
