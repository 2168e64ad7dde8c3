"""One pass that produces what a reviewer needs: ranked images, typed regions, issue masks.

`review_label_issues` runs `LabelIssueFinder` once over any input (arrays, .npy files, model +
dataset) and, in its final streaming pass, scores every image (softmin, T = 0.1), counts its flagged
pixels and groups them into typed regions. Memory stays flat in N on the streaming paths; issue masks
can be written to PNG as they are produced. `find_issue_regions` types the regions of an existing issue mask;
`save_review` and `worst_images_figure` write the tables, summary and figure.
"""
from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
from PIL import Image

from blindspots._validation import check_ignore_index
from blindspots.labels._internal.figures import worst_images_figure
from blindspots.labels._internal.inputs import BadLabelError, bad_label_advice
from blindspots.labels._internal.pixels import argmax_max, label_probs
from blindspots.labels._internal.regions import IssueRegion, image_regions, regions_frame
from blindspots.labels.filter import LabelIssueFinder
from blindspots.labels.rank import softmin_pool
from blindspots.data.classes import DEFAULT_IGNORE_INDEX

if TYPE_CHECKING:  # torch is heavy; the label engine itself needs only numpy
    from blindspots.models.adapters import Segmenter

__all__ = ["LabelReview", "review_label_issues", "find_issue_regions", "mask_png_writer", "review_summary",
           "save_review", "worst_images_figure", "IMAGE_COLUMNS"]

IMAGE_COLUMNS = ["id", "rank", "image_score", "issue_pixels", "issue_fraction", "regions"]


@dataclass
class LabelReview:
    """images: one row per image (IMAGE_COLUMNS), sorted worst first; regions: one row per region
    (regions.COLUMNS plus `id`); thresholds: float64 [K]; num_issues: estimated count."""

    images: pd.DataFrame
    regions: pd.DataFrame
    thresholds: np.ndarray
    num_issues: int


def review_label_issues(labels: Any = None, pred_probs: Any = None, *, model: Segmenter | None = None,
                        dataset: Any = None, ids: Sequence[str] | None = None, downsample: int = 1,
                        ignore_index: int | None = DEFAULT_IGNORE_INDEX, temperature: float = 0.1,
                        background: Sequence[int] = (0,),
                        min_area: int = 1, ignored_regions: bool = True, batch_size: int | None = None,
                        model_batch_size: int = 8, cache_dir: str | os.PathLike | None = None,
                        verbose: bool = True, on_mask: Callable[[int, np.ndarray], None] | None = None
                        ) -> LabelReview:
    """Rank images and find typed issue regions (inputs as in `find_label_issues`).

    ids: one string per image (default "0", "1", ...; for a dataset with `.ids`, those).
    on_mask(index, issues bool [H, W]) is called for every image as its mask is ready (e.g. to save it).
    ignored_regions: also report ignored areas confidently predicted as an object ("missing", given =
    ignore_index). Defaults: the paper's softmin temperature 0.1 and cleanlab's downsample 1.
    """
    if ids is None and dataset is not None and hasattr(dataset, "ids"):
        ids = list(dataset.ids)
    finder = LabelIssueFinder(downsample=downsample, ignore_index=ignore_index, batch_size=batch_size,
                              verbose=verbose, cache_dir=cache_dir)
    rows: list[dict[str, Any]] = []
    regions: list[IssueRegion] = []
    with finder:
        try:
            finder.fit(labels, pred_probs, model=model, dataset=dataset, model_batch_size=model_batch_size)
        except BadLabelError as e:
            raise _name_image(e, ids, dataset, ignore_index) from None
        if ids is not None and len(ids) != finder.n_images_:
            raise ValueError(f"ids: expected {finder.n_images_} ids (one per image), got {len(ids)}")
        thr = finder.confident_thresholds_ if ignored_regions else None
        n_pixels = n_labelled = 0
        given: set[int] = set()
        for start, mask, full in finder.iter_batches():
            n_pixels += int(full.valid.size)
            n_labelled += int(full.valid.sum())
            given.update(np.unique(full.labels[full.valid]).tolist())
            img_scores = softmin_pool(full.score, full.valid, temperature)
            for j in range(len(mask)):
                i = start + j
                regs = image_regions(mask[j], full.labels[j], full.pred[j], full.score[j], full.maxprob[j],
                                     image=i, background=background, ignore_index=ignore_index,
                                     min_area=min_area, ignored_thresholds=thr)
                regions += regs
                n_issue, n_valid = int(mask[j].sum()), int(full.valid[j].sum())
                rows.append({"id": ids[i] if ids is not None else str(i), "image_score": float(img_scores[j]),
                             "issue_pixels": n_issue, "issue_fraction": n_issue / n_valid if n_valid else 0.0,
                             "regions": len(regs)})
                if on_mask is not None:
                    on_mask(i, mask[j])
    _warn_ignored_foreground(n_pixels, n_labelled, given, ignore_index, finder.confident_thresholds_.shape[0])
    images = pd.DataFrame(rows, columns=[c for c in IMAGE_COLUMNS if c != "rank"])
    images = images.sort_values(["image_score", "issue_pixels"], ascending=[True, False], kind="stable")
    images.insert(1, "rank", np.arange(1, len(images) + 1))
    reg = regions_frame(regions)
    reg.insert(0, "id", [ids[i] if ids is not None else str(i) for i in reg["image"]] if len(reg) else [])
    return LabelReview(images.reset_index(drop=True), reg, finder.confident_thresholds_, finder.num_issues_)


def _warn_ignored_foreground(n_pixels: int, n_labelled: int, given: set[int], ignore_index: int | None,
                             num_classes: int) -> None:
    """Warn when the masks give no class but 0 and the rest is ignore_index: binary masks saved as 0/255
    (white foreground) read with ignore_index 255 lose every foreground pixel, silently otherwise."""
    ignored = n_pixels - n_labelled
    if ignore_index is None or not ignored or not given <= {0} or num_classes < 2:
        return
    warnings.warn(f"labels: every labelled pixel is class 0 and {ignored / n_pixels:.0%} of the pixels are "
                  f"ignore_index {ignore_index} (never checked); if {ignore_index} marks the foreground (binary "
                  f"masks saved as 0/{ignore_index}), map it to class 1 in the masks, e.g. "
                  f"np.where(m == {ignore_index}, 1, m)",
                  UserWarning, stacklevel=3)


def _name_image(e: BadLabelError, ids: Sequence[str] | None, dataset: Any, ignore_index: int | None
                ) -> ValueError:
    """The error of a label outside the model's classes, naming the image by id (and mask file)."""
    if ids is None or not 0 <= e.image < len(ids):
        return e
    name = ids[e.image]
    where = f"image {name!r}"
    if hasattr(dataset, "mask_path"):
        try:
            where += f" (mask {str(dataset.mask_path(name))!r})"
        except Exception:  # noqa: BLE001 - the id is enough
            pass
    allowed = f"0..{e.num_classes - 1}" + ("" if ignore_index is None else f" or ignore_index {ignore_index}")
    return ValueError(f"labels: expected class ids in {allowed}, got {e.value} in {where}, pixel {e.pixel}; "
                      f"{bad_label_advice(e.value, e.num_classes, ignore_index)}")


def mask_png_writer(out_dir: str | os.PathLike, ids: Sequence[str] | None = None
                    ) -> Callable[[int, np.ndarray], None]:
    """on_mask callback writing `out_dir/<id>.png` (L mode: 255 = issue, 0 = fine); without ids the id is
    the image index "0", "1", ... (the review's default ids, so images.csv's id names the file)."""
    root = Path(out_dir)

    def write(i: int, mask: np.ndarray) -> None:
        name = ids[i] if ids is not None else str(i)
        path = (root / f"{name}.png").resolve()
        if root.resolve() not in path.parents:
            raise ValueError(f"ids: expected ids that stay inside {root}, got {name!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.where(mask, 255, 0).astype(np.uint8), mode="L").save(path)

    return write


def _save_table(df: pd.DataFrame, path: Path, fmt: str) -> Path:
    p = path.with_suffix(f".{fmt}")
    if fmt == "parquet":
        df.to_parquet(p, index=False)
    else:
        df.to_csv(p, index=False)
    return p


def review_summary(review: LabelReview) -> dict[str, Any]:
    """JSON-ready counts of a review: images, estimated issues, flagged pixels, thresholds, regions by kind and
    the 20 most common (given, predicted) confusions by area."""
    regions = review.regions
    return {"num_images": len(review.images), "estimated_issues": review.num_issues,
            "flagged_pixels": int(review.images.issue_pixels.sum()),
            "confident_thresholds": [float(t) for t in review.thresholds],
            "regions_by_kind": regions.kind.value_counts().to_dict() if len(regions) else {},
            "common_confusions": (regions.groupby(["given_label", "predicted_label"]).area.sum()
                                  .sort_values(ascending=False).head(20).reset_index()
                                  .astype(int).to_dict(orient="records") if len(regions) else [])}


def save_review(review: LabelReview, out: str | os.PathLike, *, fmt: str = "csv",
                class_names: Sequence[str] | None = None) -> dict[str, Any]:
    """Write out/images.<fmt>, out/regions.<fmt> (csv or parquet) and out/summary.json; returns the summary
    with the table paths under "files". class_names: names by class id, kept in summary.json as
    "class_names" (the report names the classes of the regions and confusions)."""
    if fmt not in ("csv", "parquet"):
        raise ValueError(f"fmt: expected csv or parquet, got {fmt!r}")
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    summary = review_summary(review)
    if class_names is not None:
        summary["class_names"] = [str(n) for n in class_names]
    (root / "summary.json").write_text(json.dumps(summary, indent=2))
    files = [str(_save_table(review.images, root / "images", fmt)), str(_save_table(review.regions, root / "regions",
                                                                                     fmt))]
    return dict(summary, files=files)


def find_issue_regions(issues: np.ndarray, labels: np.ndarray, pred_probs: np.ndarray, *,
                       background: Sequence[int] = (0,), ignore_index: int | None = DEFAULT_IGNORE_INDEX,
                       min_area: int = 1,
                       connectivity: int = 2, ignored_thresholds: np.ndarray | None = None) -> pd.DataFrame:
    """Typed issue regions of a whole set, one row per region, sorted by image then region score.

    issues: bool [N, H, W] (e.g. from find_label_issues); labels: int [N, H, W];
    pred_probs: float [N, K, H, W]. See `image_regions` for the other settings.
    """
    ignore_index = check_ignore_index(ignore_index, negative=False)
    issues, labels = np.asarray(issues), np.asarray(labels)
    if issues.ndim != 3 or issues.dtype != np.bool_:
        raise ValueError(f"issues: expected a bool array of shape (N, H, W), got {issues.dtype} {issues.shape}")
    if labels.shape != issues.shape:
        raise ValueError(f"labels: expected shape {issues.shape} (as issues), got {labels.shape}")
    if np.ndim(pred_probs) != 4 or (np.shape(pred_probs)[0],) + tuple(np.shape(pred_probs)[2:]) != issues.shape:
        raise ValueError(f"pred_probs: expected shape (N, K, H, W) matching issues {issues.shape}, "
                         f"got {np.shape(pred_probs)}")
    if connectivity not in (1, 2):
        raise ValueError(f"connectivity: expected 1 (4-neighbours) or 2 (8-neighbours), got {connectivity!r}")
    regions: list[IssueRegion] = []
    for i in range(len(issues)):
        pp = np.asarray(pred_probs[i:i + 1])
        lab = labels[i:i + 1]
        valid = None if ignore_index is None else lab != ignore_index
        s = label_probs(lab, pp, valid)[0]
        pred, mp = argmax_max(pp)
        regions += image_regions(issues[i], labels[i], pred[0], s, mp[0], image=i, background=background,
                                 ignore_index=ignore_index, min_area=min_area, connectivity=connectivity,
                                 ignored_thresholds=ignored_thresholds)
    return regions_frame(regions)
