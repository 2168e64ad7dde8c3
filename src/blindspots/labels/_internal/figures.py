"""Figure of the worst-ranked images of a label review: image, given mask, prediction, issues."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from blindspots.data.classes import DEFAULT_IGNORE_INDEX, voc_palette
from blindspots.labels._internal.inputs import as_readable, predict_images, read_rows
from blindspots.labels._internal.pixels import argmax_max

# Lazy imports: matplotlib (the loop's bookkeeping commands start without them).


def _colour(mask: np.ndarray, palette: np.ndarray) -> np.ndarray:
    out = np.full(mask.shape + (3,), 255, np.uint8)
    ok = (mask >= 0) & (mask < len(palette))
    out[ok] = palette[mask[ok]]
    return out


def worst_images_figure(review: Any, *, top: int = 8, labels: Any = None, probs: Any = None, dataset: Any = None,
                        model: Any = None, ids: list[str] | None = None, issues_dir: str | Path | None = None,
                        ignore_index: int | None = DEFAULT_IGNORE_INDEX, palette: np.ndarray | None = None) -> Any:
    """Matplotlib Figure with one row per worst image (review.images order).

    Columns: image (when a dataset is given), given mask, argmax prediction, flagged pixels (red; from
    issues_dir/<id>.png; without ids the id is the index). ids: the image ids (default: dataset.ids, else
    "0", "1", ...). labels/probs: arrays or .npy paths (row index = image index), or
    dataset (dataset[i] -> (image, mask)) + model (a Segmenter) for the prediction.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    rows = review.images.head(top)
    lab_src = as_readable(labels, "labels") if labels is not None else None
    prob_src = as_readable(probs, "probs") if probs is not None else None
    if ids is None and dataset is not None and hasattr(dataset, "ids"):
        ids = list(dataset.ids)
    id_to_index = {v: i for i, v in enumerate(ids)} if ids is not None else None
    cols = 2 + (dataset is not None) + (issues_dir is not None)
    fig, axes = plt.subplots(max(len(rows), 1), cols, figsize=(3.2 * cols, 3.2 * max(len(rows), 1)), squeeze=False)
    for r, row in enumerate(rows.itertuples()):
        i = id_to_index[row.id] if id_to_index is not None else int(row.id)
        image = None
        if dataset is not None:
            image, given = dataset[i]
            pp = predict_images(model, [np.asarray(image)], None if ids is None else [ids[i]]) \
                if model is not None else None
        else:
            given = read_rows(lab_src, i, i + 1)[0]
            pp = read_rows(prob_src, i, i + 1)
        pred = argmax_max(pp)[0][0] if pp is not None else np.zeros_like(given)
        k = pp.shape[1] if pp is not None else int(given[given != ignore_index].max(initial=0)) + 1
        pal = voc_palette(max(k, 1)) if palette is None else np.asarray(palette, np.uint8)
        c = 0
        if image is not None:
            axes[r, c].imshow(image)
            axes[r, c].set_title(f"#{row.rank} {row.id}", fontsize=8)
            c += 1
        axes[r, c].imshow(_colour(np.asarray(given), pal))
        axes[r, c].set_title(f"given (score {row.image_score:.3f})", fontsize=8)
        c += 1
        axes[r, c].imshow(_colour(pred, pal))
        axes[r, c].set_title("prediction", fontsize=8)
        c += 1
        if issues_dir is not None:
            p = Path(issues_dir) / f"{row.id}.png"
            m = np.asarray(Image.open(p)) > 0 if p.is_file() else np.zeros(given.shape, bool)
            base = np.asarray(image) if image is not None else _colour(np.asarray(given), pal)
            over = base.copy()
            over[m] = (255, 0, 0)
            axes[r, c].imshow(over)
            axes[r, c].set_title(f"{row.issue_pixels} flagged, {row.regions} regions", fontsize=8)
    for ax in axes.ravel():
        ax.axis("off")
    fig.tight_layout()
    return fig
