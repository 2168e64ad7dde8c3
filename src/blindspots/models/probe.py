"""`probe_model`: run one image through a loaded model before any long job relies on it.

`blindspots init` (and any entry point that loads models) calls it on one pool image, so a bad
spec, a model that cannot take the pool's image size, or invalid outputs fail in one line at
set-up, not rounds later.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from blindspots.models.protocol import PROBA_TOLERANCE, predict_segmenter, reads_ids, short_reason


def probe_model(seg: Any, image: np.ndarray, name: str, *, image_id: str | None = None) -> None:
    """Run one uint8 [H, W, 3] image through `seg`; a one-line ValueError naming `name` if it fails.

    Checks the output is float32 [1, C, H, W] probabilities (finite, in [0, 1], summing to 1) and
    that `seg.classes` (when present) names C classes. A model keyed by id (precomputed outputs,
    `reads_ids`) is probed with `image_id` when given (otherwise only its settings are checked).
    """
    spec = getattr(seg, "info", {}).get("spec")
    label = f"model {name!r}" + (f" ({spec})" if spec and spec != name else "")
    img = np.asarray(image)
    if img.dtype != np.uint8 or img.ndim != 3 or img.shape[-1] not in (1, 3):
        raise ValueError(f"image: expected uint8 [H, W, 3], got {img.dtype} {img.shape}")
    h, w = img.shape[:2]
    c = getattr(seg, "num_classes", None)
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
        raise ValueError(f"{label}: expected a positive integer num_classes, got {c!r}")
    classes = getattr(seg, "classes", None)
    if classes is not None and len(classes) != c:
        raise ValueError(f"{label}: expected {c} class names (num_classes), got {len(classes)}")
    try:
        if reads_ids(seg) and image_id is None:
            return
        proba = predict_segmenter(seg, img[None], None if image_id is None else [image_id])
    except Exception as e:  # noqa: BLE001 - report any failure in one line
        raise ValueError(f"{label}: failed on a {h}x{w} image: {short_reason(e)}") from None
    arr = np.asarray(proba)
    if arr.shape != (1, c, h, w) or arr.dtype != np.float32:
        raise ValueError(f"{label}: expected float32 probabilities [1, {c}, {h}, {w}] for a {h}x{w} image, "
                         f"got {arr.dtype} {arr.shape}")
    if not np.isfinite(arr).all() or arr.min() < -PROBA_TOLERANCE or arr.max() > 1 + PROBA_TOLERANCE \
            or np.abs(arr.sum(1) - 1).max() > PROBA_TOLERANCE:
        raise ValueError(f"{label}: expected probabilities (finite, in [0, 1], summing to 1 over classes), "
                         f"got values in [{np.nanmin(arr):.4g}, {np.nanmax(arr):.4g}]")
