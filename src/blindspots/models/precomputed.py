"""Probabilities already on disk: one `<folder>/<id>.npy` per image id, float [C, H, W].

A precomputed model is keyed by image id, not by pixels, so besides the Segmenter protocol's
`predict_proba(images)` (which cannot know which files to read and raises a ValueError saying
so) it offers `predict_proba_ids(ids) -> float32 [N, C, H, W]`. Engines that stream a pool
(`blindspots.scan`) check for `predict_proba_ids` and call it with the batch's ids.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from blindspots.models.adapters import OutputKind, check_probabilities

NPY_SUFFIX = ".npy"


class PrecomputedSegmenter:
    """Per-pixel probabilities stored as `<folder>/<id>.npy` arrays of shape [C, H, W].

    folder: the root; an id may contain "/" (sub-folders), the file is `folder / (id + ".npy")`.
    num_classes: C, or None to read it from the first file found.
    output: "probabilities" (default; validated) or "logits" (softmaxed over C).
    """

    def __init__(self, folder: str | Path, num_classes: int | None = None, *,
                 output: OutputKind = "probabilities") -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise ValueError(f"folder: expected an existing folder of <id>.npy files, got {str(self.folder)!r}")
        if output not in ("logits", "probabilities"):
            raise ValueError(f"output: expected 'logits' or 'probabilities', got {output!r}")
        self.output = output
        if num_classes is None:
            first = next(iter(sorted(self.folder.rglob("*" + NPY_SUFFIX))), None)
            if first is None:
                raise ValueError(f"folder: expected at least one .npy file to read num_classes from, "
                                 f"got none in {str(self.folder)!r}")
            num_classes = int(np.load(first, mmap_mode="r").shape[0])
        if num_classes < 1:
            raise ValueError(f"num_classes: expected a positive integer, got {num_classes}")
        self.num_classes = int(num_classes)

    def path(self, image_id: str) -> Path:
        """The file of `image_id`; ValueError for ids that would leave the folder."""
        p = Path(image_id)
        if p.is_absolute() or ".." in p.parts or not image_id:
            raise ValueError(f"ids: expected relative ids inside the folder, got {image_id!r}")
        return self.folder / (image_id + NPY_SUFFIX)

    def predict_proba_ids(self, ids: Sequence[str], sizes: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
        """ids: N image ids (equal-size arrays) -> float32 [N, C, H, W].

        sizes: optional (H, W) per id that each array must match (the decoded image sizes).
        """
        ids = list(ids)
        if not ids:
            raise ValueError("ids: expected at least one image id, got an empty sequence")
        arrays = []
        for i, image_id in enumerate(ids):
            f = self.path(image_id)
            if not f.is_file():
                raise ValueError(f"ids: expected a file {str(f)!r} for id {image_id!r}, got none")
            a = np.load(f)
            if a.ndim != 3 or a.shape[0] != self.num_classes:
                raise ValueError(f"{f}: expected shape [{self.num_classes}, H, W], got {a.shape}")
            if sizes is not None and tuple(a.shape[1:]) != tuple(sizes[i]):
                raise ValueError(f"{f}: expected H, W = {tuple(sizes[i])} (the image size), got {a.shape[1:]}")
            arrays.append(a)
        shapes = {a.shape for a in arrays}
        if len(shapes) != 1:
            raise ValueError(f"ids: expected arrays of one size per batch, got shapes {sorted(shapes)}")
        batch = np.stack(arrays)
        n, _, h, w = batch.shape
        return check_probabilities(batch, expected_shape=(n, self.num_classes, h, w), output=self.output,
                                   name=f"precomputed probabilities in {str(self.folder)!r}")

    def predict_proba(self, images: np.ndarray) -> np.ndarray:
        """Not available from pixels: raises ValueError; use `predict_proba_ids(ids)`."""
        raise ValueError("images: a PrecomputedSegmenter is keyed by image id, not pixels; "
                         "call predict_proba_ids(ids) instead")
