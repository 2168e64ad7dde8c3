"""Analyses of the SA paper (Kim et al. 2023, Section 5.3), each returning tables and drawing figures.

- ``group_iou`` + ``spearman_table``: Spearman correlation of class (group) SA vs per-image class
  (group) IoU with p-values — Table 3 (RQ1).
- ``label_saving_tradeoff`` + ``plot_label_saving``: skip the x% lowest-SA images; inaccuracy among
  the skipped ones at IoU thresholds 0.5..0.9 and mean IoU inaccuracy — Figure 9 (RQ2).
- ``retraining_subsets`` + ``run_retraining``: high / low / random SA subsets of small / medium / large
  size added to a base set through the fine-tuning routine — Tables 4-5 (RQ3).
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from scipy.stats import spearmanr
from tqdm.auto import tqdm

from blindspots.metrics import evaluate, per_image_class_iou
from blindspots.data.classes import DEFAULT_IGNORE_INDEX
from blindspots.data.segsets import SegmentationSet
from blindspots.models.adapters import TorchSegmenter
from blindspots.surprise.estimators import load_estimator
from blindspots.surprise.image import class_surprise, group_surprise, size_groups
from blindspots.surprise.pool import check_same_source, fitted_extractor
from blindspots.training.replay import SubsetPairs

logger = logging.getLogger(__name__)

#: Figure 9's IoU thresholds and savings grid (0%, 5%, ..., 100%).
IOU_THRESHOLDS = (0.5, 0.6, 0.7, 0.8, 0.9)
SAVINGS = tuple(np.round(np.arange(0, 1.0001, 0.05), 2))
#: RQ3 subset sizes as fractions of the base set (Small 10%, Medium 20%, Large 30%) and the share of
#: the SA-sorted candidates that High / Low subsets are drawn from (top / bottom 30%).
RETRAIN_SIZES = {"S": 0.10, "M": 0.20, "L": 0.30}
RETRAIN_POOL_FRACTION = 0.30


def group_iou(pred: np.ndarray, target: np.ndarray, num_classes: int,
              groups: Mapping[str, Sequence[int]] | None = None, *, ignore_index: int | None = DEFAULT_IGNORE_INDEX
              ) -> tuple[np.ndarray, np.ndarray]:
    """Per-image IoU of every class group, classes of a group merged (paper: lanes = classes 1-3).

    pred: int [N, H, W]; target: int [N, H, W] (ignore_index excluded). groups: name -> class ids
    (None: one group per class). Returns (iou float64 [N, G] — NaN where the group is absent from both
    maps — and in_label bool [N, G]: the group occurs in the label, the images Table 3 counts).
    """
    pred, target = np.asarray(pred), np.asarray(target)
    groups = _groups(groups, num_classes)
    g = len(groups)
    lut = np.full(num_classes, g, dtype=np.int64)  # classes outside every group -> "other"
    for i, members in enumerate(groups.values()):
        lut[list(members)] = i
    valid_t = target != ignore_index if ignore_index is not None else np.ones(target.shape, bool)
    if np.any((target[valid_t] < 0) | (target[valid_t] >= num_classes)):
        bad = np.unique(target[valid_t & ((target < 0) | (target >= num_classes))])
        raise ValueError(f"target: expected label ids in 0..{num_classes - 1} (the model's {num_classes} classes) "
                         f"or {ignore_index}, got ids {bad[:10].tolist()} (masks of another label set?)")
    if pred.size and (pred.min() < 0 or pred.max() >= num_classes):
        raise ValueError(f"pred: expected class ids in 0..{num_classes - 1}, got {pred.min()}..{pred.max()}")
    t = np.where(valid_t, lut[np.where(valid_t, target, 0)], 255)
    iou = per_image_class_iou(lut[pred], t, g + 1, ignore_index=255)[:, :g]
    in_label = np.stack([(t == i).any(axis=(1, 2)) for i in range(g)], axis=1)
    return iou, in_label


def _groups(groups: Mapping[str, Sequence[int]] | None, num_classes: int) -> dict[str, list[int]]:
    if groups is None:
        return {str(k): [k] for k in range(num_classes)}
    out = {}
    for name, members in groups.items():
        m = [int(c) for c in members]
        if not m or any(not 0 <= c < num_classes for c in m):
            raise ValueError(f"groups: expected class ids in 0..{num_classes - 1} for {name!r}, got {m}")
        out[str(name)] = m
    return out


def spearman_table(sa: Mapping[str, np.ndarray], iou: np.ndarray, names: Sequence[str],
                   in_label: np.ndarray | None = None) -> pd.DataFrame:
    """Table 3: Spearman rho and p of SA vs IoU per class group, for each SA kind.

    sa: kind name ("LSA", "MDSA", ...) -> float [N, G] image-level class/group SA (NaN = not predicted).
    iou: float [N, G]; in_label: bool [N, G] images containing the group (None: IoU finite).
    An image enters a group's row when the group is in its label and every SA kind is finite.
    Columns: group, n_images, then rho_<kind>, p_<kind> per kind (NaN if fewer than 3 images).
    """
    iou = np.asarray(iou, dtype=np.float64)
    if iou.ndim != 2 or iou.shape[1] != len(names):
        raise ValueError(f"iou: expected float [N, {len(names)}] (one column per name), got shape {iou.shape}")
    for k, v in sa.items():
        if np.shape(v) != iou.shape:
            raise ValueError(f"sa[{k!r}]: expected shape {iou.shape} like iou, got {np.shape(v)}")
    present = np.isfinite(iou) if in_label is None else np.asarray(in_label, bool) & np.isfinite(iou)
    rows = []
    for g, name in enumerate(names):
        use = present[:, g].copy()
        for v in sa.values():
            use &= np.isfinite(np.asarray(v, dtype=np.float64)[:, g])
        row: dict[str, Any] = {"group": name, "n_images": int(use.sum())}
        for kind, v in sa.items():
            x, y = np.asarray(v, dtype=np.float64)[use, g], iou[use, g]
            if use.sum() >= 3 and np.ptp(x) > 0 and np.ptp(y) > 0:
                res = spearmanr(x, y)
                row[f"rho_{kind}"], row[f"p_{kind}"] = float(res.statistic), float(res.pvalue)
            else:
                row[f"rho_{kind}"], row[f"p_{kind}"] = np.nan, np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def label_saving_tradeoff(sa: np.ndarray, iou: np.ndarray, *, thresholds: Sequence[float] = IOU_THRESHOLDS,
                          savings: Sequence[float] = SAVINGS) -> pd.DataFrame:
    """Figure 9 for one class group: skip labelling the x% lowest-SA images and accept the prediction.

    sa, iou: float [N] per-image SA and IoU of the group (rows with a NaN in either are dropped).
    Returns one row per saving x: saving, n_skipped, ``inacc@t`` = fraction of skipped images with
    IoU < t (classification inaccuracy, Figure 9a-e) and ``iou_inacc`` = mean (1 - IoU) of the skipped
    images (Figure 9f); 0 when nothing is skipped. Ties in SA are broken by image order.
    """
    sa, iou = np.asarray(sa, dtype=np.float64), np.asarray(iou, dtype=np.float64)
    if sa.shape != iou.shape or sa.ndim != 1:
        raise ValueError(f"sa, iou: expected two float [N] arrays of one shape, got {sa.shape} and {iou.shape}")
    ok = np.isfinite(sa) & np.isfinite(iou)
    sa, iou = sa[ok], iou[ok]
    order = np.lexsort((np.arange(sa.size), sa))
    iou_sorted = iou[order]
    rows = []
    for x in savings:
        if not 0 <= x <= 1:
            raise ValueError(f"savings: expected fractions in [0, 1], got {x}")
        k = int(np.floor(x * sa.size + 1e-9))
        skipped = iou_sorted[:k]
        row: dict[str, float] = {"saving": float(x), "n_skipped": k}
        for t in thresholds:
            row[f"inacc@{t:g}"] = float((skipped < t).mean()) if k else 0.0
        row["iou_inacc"] = float((1 - skipped).mean()) if k else 0.0
        rows.append(row)
    return pd.DataFrame(rows)


def plot_label_saving(curves: Mapping[str, pd.DataFrame], title: str = "SA label-saving trade-off"):
    """Figure 9: panels (a)-(e) classification inaccuracy at each IoU threshold, (f) IoU inaccuracy.

    curves: group name -> ``label_saving_tradeoff`` table. Returns a matplotlib Figure.
    """
    matplotlib.use("Agg", force=False)

    if not curves:
        raise ValueError("curves: expected at least one group's trade-off table, got none")
    first = next(iter(curves.values()))
    metrics = [c for c in first.columns if c.startswith("inacc@")] + ["iou_inacc"]
    cols = 3
    rows = -(-len(metrics) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.3 * rows), squeeze=False)
    markers = "os^vD<>p*h"
    for ax, metric, letter in zip(axes.flat, metrics, "abcdefghij"):
        for j, (name, df) in enumerate(curves.items()):
            ax.plot(100 * df["saving"], df[metric], marker=markers[j % len(markers)], ms=3, label=name)
        what = (f"Classification inaccuracy (IoU < {metric.split('@')[1]})" if metric != "iou_inacc"
                else "IoU inaccuracy (1 - IoU)")
        ax.set_title(f"({letter}) {what}", fontsize=9)
        ax.set_xlabel("Savings in labelling (%)")
        ax.set_ylabel("Inaccuracy")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(metrics):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def retraining_subsets(sa: np.ndarray, base_size: int, *, sizes: Mapping[str, float] = RETRAIN_SIZES,
                       pool_fraction: float = RETRAIN_POOL_FRACTION, seed: int = 0
                       ) -> dict[tuple[str, str], np.ndarray]:
    """RQ3 subsets: {(level, size): indices int64 [k]} into the candidate images.

    sa: float [N] SA of each candidate (e.g. vehicle class SA; NaN = not eligible).
    base_size: images in the base training set; a subset has round(size * base_size) images
        (paper: Small/Medium/Large = 10/20/30% of the base). Level "H" draws from the top
        `pool_fraction` (30%) of candidates by SA, "L" from the bottom 30%, "R" from all candidates.
    """
    sa = np.asarray(sa, dtype=np.float64)
    if sa.ndim != 1:
        raise ValueError(f"sa: expected float [N], got shape {sa.shape}")
    if base_size < 1:
        raise ValueError(f"base_size: expected a positive integer, got {base_size}")
    if not 0 < pool_fraction <= 1:
        raise ValueError(f"pool_fraction: expected a fraction in (0, 1], got {pool_fraction}")
    eligible = np.flatnonzero(np.isfinite(sa))
    order = eligible[np.lexsort((eligible, sa[eligible]))]  # ascending SA
    m = max(1, int(np.ceil(pool_fraction * order.size)))
    sources = {"H": order[-m:], "L": order[:m], "R": order}
    out: dict[tuple[str, str], np.ndarray] = {}
    for li, (level, src) in enumerate(sources.items()):
        for si, (size, frac) in enumerate(sizes.items()):
            k = int(round(frac * base_size))
            if k > src.size:
                raise ValueError(f"sa: level {level!r} size {size!r} needs {k} images but only {src.size} "
                                 f"candidates are eligible; add candidates or reduce sizes/base_size")
            rng = np.random.default_rng([seed, li, si])
            out[(level, size)] = np.sort(rng.choice(src, size=k, replace=False)).astype(np.int64)
    return out


def class_iou(module: Any, data: Any, num_classes: int, *, batch_size: int = 8) -> np.ndarray:
    """Pooled per-class IoU float64 [C] of a torch segmentation module on a labelled set."""
    seg = TorchSegmenter(module, num_classes, batch_size=batch_size)
    return evaluate(seg, data, num_classes, batch_size=batch_size).iou_per_class()


def run_retraining(model: Any, base: Any, candidates: Any, sa: np.ndarray, val: Any, test: Any, *,
                   num_classes: int, class_id: int, finetuner: Callable[[], Any],
                   work_dir: str | Path, sizes: Mapping[str, float] = RETRAIN_SIZES, seed: int = 0
                   ) -> pd.DataFrame:
    """Tables 4-5: fine-tune `model` on base + each SA subset and report the class IoU on `test`.

    base, candidates, val, test: labelled sets (``len()``, ``[i] -> (image, mask)``).
    finetuner: builds a fresh ``blindspots.training.replay.ReplayFinetuner`` (settings are the
        caller's); each run calls ``fit(model, subset, base, val, num_classes=...)``. Row "B" is the
        same routine on the base set alone, the control the paper calls T'_r[Base].
    Results are written to ``work_dir/retrain.json`` after every run; a rerun skips finished runs.
    Returns columns dataset, level, size, n_added, class_iou, miou.
    """
    work = Path(work_dir)
    work.mkdir(parents=True, exist_ok=True)
    done_path = work / "retrain.json"
    done: dict[str, dict] = json.loads(done_path.read_text()) if done_path.is_file() else {}
    subsets = retraining_subsets(sa, len(base), sizes=sizes, seed=seed)
    runs: list[tuple[str, str, str, np.ndarray]] = [("B", "B", "-", np.zeros(0, dtype=np.int64))]
    runs += [(f"{lv},{sz}", lv, sz, idx) for (lv, sz), idx in subsets.items()]
    for name, level, size, idx in runs:
        if name in done:
            continue
        ft = finetuner()
        if hasattr(ft, "work_dir"):
            ft.work_dir = work / name.replace(",", "_")
        ft.fit(model, SubsetPairs(candidates, idx.tolist()), base, val, num_classes=num_classes)
        ious = class_iou(ft.model_, test, num_classes)
        done[name] = {"level": level, "size": size, "n_added": int(idx.size),
                      "class_iou": float(ious[class_id]), "miou": float(np.nanmean(ious))}
        done_path.write_text(json.dumps(done, indent=1))
        logger.info("retraining %s: class %d IoU %.4f", name, class_id, done[name]["class_iou"])
    rows = [{"dataset": f"T'r[{k}]", **v} for k, v in done.items()]
    return pd.DataFrame(rows, columns=["dataset", "level", "size", "n_added", "class_iou", "miou"])


def sa_and_iou(extractor: Any, estimators: Mapping[str, Any], dataset: Any, *,
               groups: Mapping[str, Sequence[int]] | None = None, per_class: int | None = 1000, seed: int = 0,
               ignore_index: int | None = DEFAULT_IGNORE_INDEX, chunk: int = 64, progress: bool = False
               ) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray]:
    """Image-level group SA of every estimator and the group IoU of the model on a labelled set.

    dataset: ``len()`` and ``[i] -> (image uint8 [H, W, 3], mask int [H, W])``; read `chunk` images at a
    time, each size within a chunk run as one batch (images of different sizes are fine).
    groups: name -> class ids (None: one group per class). A single-class group's SA is the raw class SA
    (comparable to the paper's per-class LSA/MDSA); a multi-class group's SA is the mean of z-scored class
    SAs (Section 5.1).
    Returns (sa: name -> float64 [N, G], iou float64 [N, G], in_label bool [N, G], pred int64 [N, H, W]
    for equal-size sets else an empty array).
    """
    c = extractor.num_classes
    groups = _groups(groups, c)
    out_sa: dict[str, list[np.ndarray]] = {k: [] for k in estimators}
    ious, labs, preds = [], [], []
    n = len(dataset)
    all_ids = getattr(dataset, "ids", None)  # for features / predictions read by image id
    for s in tqdm(range(0, n, chunk), desc="SA vs IoU", disable=not progress):
        items = [dataset[i] for i in range(s, min(n, s + chunk))]
        by_size = size_groups([np.asarray(im) for im, _ in items])
        if by_size is None:
            imgs: Any = np.stack([np.asarray(im) for im, _ in items])
            masks: Any = np.stack([np.asarray(mk) for _, mk in items]).astype(np.int64)
        else:  # mixed sizes: class_surprise runs each size as one batch; IoU per size below
            imgs = [np.asarray(im) for im, _ in items]
            masks = [np.asarray(mk).astype(np.int64) for _, mk in items]
        pred = None
        for name, est in estimators.items():
            res = class_surprise(extractor, est, imgs, per_class=per_class, seed=seed + s,
                                 ids=None if all_ids is None else list(all_ids[s:s + len(items)]))
            pred = res.pred
            cols = []
            for members in groups.values():
                if len(members) == 1:
                    cols.append(res.class_sa[:, members[0]])
                else:
                    cols.append(group_surprise(res.class_sa, est, {"g": members})[:, 0])
            out_sa[name].append(np.stack(cols, axis=1))
        if by_size is None:
            iou, in_label = group_iou(pred, masks, c, groups, ignore_index=ignore_index)
        else:
            iou, in_label = np.empty((len(items), len(groups))), np.empty((len(items), len(groups)), dtype=bool)
            for ix in by_size:
                iou[ix], in_label[ix] = group_iou(np.stack([pred[i] for i in ix]), np.stack([masks[i] for i in ix]),
                                                  c, groups, ignore_index=ignore_index)
            pred = None  # no one [N, H, W] array for mixed sizes
        ious.append(iou)
        labs.append(in_label)
        preds.append(pred)
    same = all(p is not None for p in preds) and len({p.shape[1:] for p in preds}) == 1
    return ({k: np.concatenate(v) for k, v in out_sa.items()}, np.concatenate(ious), np.concatenate(labs),
            np.concatenate(preds) if same else np.zeros(0, dtype=np.int64))


def write_table3(images: str | Path, masks: str | Path, estimators: Sequence[str | Path], out: str | Path, *,
                 model: str | None = None, features: str | None = None,
                 groups: Mapping[str, Sequence[int]] | None = None, per_class: int = 1000, seed: int = 0,
                 batch_size: int = 16, progress: bool = True) -> pd.DataFrame:
    """Table 3 (Spearman SA vs IoU with p-values, every estimator) and Figure 9 (the first estimator's
    label-saving trade-off) on a labelled set (images/, masks/ folders), written to `out` as table3.csv,
    figure9.csv and figure9.png; returns Table 3. Every estimator is scored with the first one's traces
    (`check_same_source`); groups: class groups NAME -> ids (default: one group per class)."""
    paths = [Path(e) for e in estimators]
    if not paths:
        raise ValueError("estimators: expected at least one estimator file, got none")
    check_same_source(paths)
    ests: dict[str, Any] = {}
    for path in paths:
        est = load_estimator(path)
        ests[est.name.upper() if est.name.upper() not in ests else f"{est.name.upper()}_{len(ests)}"] = est
    ex = fitted_extractor(paths[0], model, batch_size, features)
    sa, iou, in_label, _ = sa_and_iou(ex, ests, SegmentationSet(images, masks), groups=groups, per_class=per_class,
                                      seed=seed, progress=progress)
    names = list(groups) if groups else [str(k) for k in range(ex.num_classes)]
    table = spearman_table(sa, iou, names, in_label)
    first = next(iter(sa))
    curves = {}
    for g, nm in enumerate(names):
        use = in_label[:, g] & np.isfinite(sa[first][:, g])
        if use.sum():
            curves[nm] = label_saving_tradeoff(sa[first][use, g], iou[use, g])
    if not curves:
        raise ValueError("masks: expected some images whose label and prediction share a group, got none")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "table3.csv", index=False)
    pd.concat([df.assign(group=k) for k, df in curves.items()]).to_csv(out / "figure9.csv", index=False)
    plot_label_saving(curves, title=f"{first} label-saving trade-off").savefig(out / "figure9.png", dpi=120)
    return table
