"""Region answers: a person names the class of one region (or says "mixed / unsure"); the answers of an
image become a partial mask for fine-tuning, its other pixels left out of the loss (the ignore value)
or, in the "confident" fill mode, taken where every model agrees confidently
(`blindspots.mine.regions.confident_labels`).

Public API: `MIXED` (the answer "mixed / unsure": None), `partial_mask(segments, answers, base=None,
ignore_index=255) -> uint8 [H, W]`, `simulated_region_answer(truth, segments, region, purity=0.8)`,
`FILL_MODES`.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from blindspots._validation import check_number
from blindspots.data.classes import DEFAULT_IGNORE_INDEX

__all__ = ["MIXED", "FILL_MODES", "partial_mask", "simulated_region_answer"]

#: the answer "mixed / unsure": the region stays out of the loss
MIXED = None
#: what the pixels outside the answered regions become: left out of the loss, or the target's label where
#: every model agrees confidently
FILL_MODES = ("ignore", "confident")


def partial_mask(segments: np.ndarray, answers: Mapping[int, int | None], *, base: np.ndarray | None = None,
                 ignore_index: int = DEFAULT_IGNORE_INDEX) -> np.ndarray:
    """uint8 [H, W]: each answered region's pixels take its class; a "mixed / unsure" answer (None) makes its
    region `ignore_index` (a person saw more than one class there, so no model's label is kept either); the
    rest is `base` (uint8 [H, W], e.g. confident labels) or `ignore_index` when base is None.

    segments: int [H, W] region ids. answers: region id -> class id 0..254, or None.
    """
    seg = np.asarray(segments)
    if seg.ndim != 2 or not np.issubdtype(seg.dtype, np.integer):
        raise ValueError(f"segments: expected int region ids [H, W], got {seg.dtype} {seg.shape}")
    if base is None:
        out = np.full(seg.shape, ignore_index, dtype=np.uint8)
    else:
        b = np.asarray(base)
        if b.shape != seg.shape:
            raise ValueError(f"base: expected a uint8 [H, W] = {seg.shape} mask, got {b.shape}")
        out = b.astype(np.uint8, copy=True)
    n = int(seg.max()) + 1 if seg.size else 0
    lut = np.full(n + 1, -1, dtype=np.int64)  # region -> class, -1: keep `out`, 256: ignore
    for region, label in answers.items():
        if not isinstance(region, (int, np.integer)) or not 0 <= int(region) < n:
            raise ValueError(f"answers: expected region ids in 0..{n - 1}, got {region!r}")
        if label is not None and (not isinstance(label, (int, np.integer)) or not 0 <= int(label) <= 254
                                  or int(label) == ignore_index):
            raise ValueError(f"answers[{region}]: expected a class id in 0..254 (not {ignore_index}) or None, "
                             f"got {label!r}")
        lut[int(region)] = ignore_index if label is None else int(label)
    new = lut[seg]
    return np.where(new >= 0, new, out).astype(np.uint8)


def simulated_region_answer(truth: np.ndarray, segments: np.ndarray, region: int, *, purity: float = 0.8,
                            ignore_index: int = DEFAULT_IGNORE_INDEX) -> int | None:
    """A simulated person's answer for one region: the true majority class when it covers at least `purity`
    of the region's labelled pixels, else None ("mixed / unsure"; also when none is labelled).

    truth: int [H, W] true mask; segments: int [H, W] region ids; region: the id asked about.
    """
    check_number(purity, "purity", low=0, high=1)
    t, seg = np.asarray(truth), np.asarray(segments)
    if t.shape != seg.shape:
        raise ValueError(f"truth: expected the segments' shape {seg.shape}, got {t.shape}")
    values = t[(seg == region) & (t != ignore_index)]
    if values.size == 0:
        return None
    counts = np.bincount(values.astype(np.int64))
    best = int(counts.argmax())
    return best if counts[best] >= purity * values.size else None
