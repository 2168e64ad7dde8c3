"""The label-issues folder: review a labelled segmentation set and write what a reader opens (tables, issue
masks, a figure of the worst images). The `label-issues` command and `blindspots.Scan.label_issues` both
call `write_label_issues`; the report pages read the folder (`blindspots.report.write_label_issues_report`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from blindspots._validation import check_int
from blindspots.data.classes import DEFAULT_IGNORE_INDEX
from blindspots.labels._internal.figures import worst_images_figure
from blindspots.labels.review import LabelReview, mask_png_writer, review_label_issues, save_review

# Lazy imports: matplotlib (only for the figure: a table-only run starts without it).

__all__ = ["MIN_AREA", "write_label_issues"]

#: the smallest region (pixels) a label-issues folder lists: smaller ones are mostly boundary noise
MIN_AREA = 16


def write_label_issues(out: str | Path, labels: Any = None, pred_probs: Any = None, *, model: Any = None,
                       dataset: Any = None, ids: Sequence[str] | None = None,
                       ignore_index: int | None = DEFAULT_IGNORE_INDEX, class_names: Sequence[str] | None = None,
                       palette: np.ndarray | None = None, background: Sequence[int] = (0,), min_area: int = MIN_AREA,
                       top: int = 8, fmt: str = "csv", write_masks: bool = True,
                       **options: Any) -> tuple[LabelReview, dict[str, Any]]:
    """Find the label issues (`review_label_issues`) and write the folder `out`.

    Inputs, as `review_label_issues` takes them: `labels` int [N, H, W] with `pred_probs` float [N, K, H, W]
    (arrays or `.npy` paths), or a `model` (a `Segmenter`) with a `dataset` of (image uint8 [H, W, 3], mask
    int [H, W]) pairs; ids: one string per image (default: the dataset's ids, else "0", "1", ...).
    Writes images.<fmt> and regions.<fmt> (fmt: "csv" or "parquet") and summary.json (`save_review`;
    class_names kept there), issues/<id>.png (255 = flagged pixel; write_masks) and worst.png, the `top`
    worst images (0: no figure; palette: uint8 [K, 3] colours of the masks). background: class ids of the
    background (region types); min_area: the smallest region listed in regions.<fmt>, in pixels. options: the
    rest of `review_label_issues`'s (downsample, model_batch_size, cache_dir, verbose).
    Returns the review and the summary (with the tables' paths under "files").
    """
    if fmt not in ("csv", "parquet"):
        raise ValueError(f"fmt: expected 'csv' or 'parquet', got {fmt!r}")
    check_int(top, "top", minimum=0)
    root = Path(out)
    root.mkdir(parents=True, exist_ok=True)
    if ids is None and dataset is not None and hasattr(dataset, "ids"):
        ids = list(dataset.ids)
    review = review_label_issues(labels, pred_probs, model=model, dataset=dataset, ids=ids, ignore_index=ignore_index,
                                 background=background, min_area=min_area,
                                 on_mask=mask_png_writer(root / "issues", ids) if write_masks else None, **options)
    summary = save_review(review, root, fmt=fmt, class_names=class_names)
    if top > 0 and len(review.images):
        import matplotlib.pyplot as plt

        fig = worst_images_figure(review, top=top, labels=labels, probs=pred_probs, dataset=dataset, model=model,
                                  ids=ids, issues_dir=root / "issues" if write_masks else None,
                                  ignore_index=ignore_index, palette=palette)
        fig.savefig(root / "worst.png", dpi=80)
        plt.close(fig)  # a notebook would show it again; the file is the figure
    return review, summary
