"""Probabilities already on disk: one `<folder>/<id>.npy` (or `<artifact name>.npy`) per image id, float [C, H, W].

A precomputed model is keyed by image id, not by pixels (`reads_ids = True`): the protocol's
`predict_proba(images, ids)` reads one file per id and checks it against its image's size;
without ids it raises a ValueError saying so. Engines call it through
`blindspots.models.protocol.predict_segmenter`, which passes the batch's ids.
A one-channel array is a binary model ([1 - p, p]; with output="logits" a sigmoid first).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from blindspots.data.classes import Classes
from blindspots.ids import artifact_name
from blindspots.models.adapters.outputs import check_raw, to_probabilities, to_tensor
from blindspots.models.protocol import default_classes

NPY_SUFFIX = ".npy"


class PrecomputedSegmenter:
    """Per-pixel probabilities stored as `<folder>/<id>.npy` arrays of shape [C, H, W].

    folder: the root; an id may contain "/" (sub-folders), the file is `folder / (id + ".npy")`.
    num_classes: C, or None to read it from the first file found (one channel: 2 classes).
    output: "probabilities" (default; validated) or "logits" (softmaxed over C).
    classes: class names (default class_0..); info: where the model came from.
    """

    reads_ids = True  # the protocol's flag: outputs are read by image id, not pixels

    def __init__(self, folder: str | Path, num_classes: int | None = None, *,
                 output: str = "probabilities", classes: Classes | None = None,
                 info: dict[str, Any] | None = None) -> None:
        self.folder = Path(folder)
        if not self.folder.is_dir():
            raise ValueError(f"folder: expected an existing folder of <id>.npy files, got {str(self.folder)!r}")
        if output not in ("logits", "probabilities"):
            raise ValueError(f"output: expected 'logits' or 'probabilities', got {output!r}")
        self.output = output
        self.info = dict(info or {})
        if num_classes is None and classes is not None:
            num_classes = classes.num_classes
        if num_classes is None:
            first = next(iter(sorted(self.folder.rglob("*" + NPY_SUFFIX))), None)
            if first is None:
                raise ValueError(f"folder: expected at least one .npy file to read num_classes from, "
                                 f"got none in {str(self.folder)!r}")
            channels = int(np.load(first, mmap_mode="r").shape[0])
            num_classes = 2 if channels == 1 else channels
        if num_classes < 2:
            raise ValueError(f"num_classes: expected at least 2 (one channel is a binary model), got {num_classes}")
        if classes is not None and classes.num_classes != num_classes:
            raise ValueError(f"classes: expected {num_classes} class names, got {classes.num_classes}")
        self.num_classes = int(num_classes)
        self.classes = classes if classes is not None else default_classes(self.num_classes)

    def path(self, image_id: str) -> Path:
        """The file of `image_id`: `<id>.npy`, else the ids rule's name (extension replaced by .npy,
        `blindspots.ids.artifact_name`); the first when neither exists. ValueError for ids leaving the folder."""
        p = Path(image_id)
        if p.is_absolute() or ".." in p.parts or not image_id:
            raise ValueError(f"ids: expected relative ids inside the folder, got {image_id!r}")
        legacy = self.folder / (image_id + NPY_SUFFIX)
        if legacy.is_file():
            return legacy
        ruled = self.folder / artifact_name(image_id, NPY_SUFFIX)
        return ruled if ruled.is_file() else legacy

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray] | None,
                      ids: Sequence[str] | None = None) -> np.ndarray:
        """ids: N image ids (equal-size arrays) -> float32 [N, C, H, W].

        images: the N images uint8 [N, H, W, 3] (or a sequence of [H, W, 3]), used only for their
        sizes, which each array must match; None: no size check (e.g. per-image classifier outputs).
        """
        if ids is None:
            raise ValueError("ids: expected the images' ids (a PrecomputedSegmenter is keyed by image id, not "
                             "pixels), got None")
        ids = list(ids)
        if not ids:
            raise ValueError("ids: expected at least one image id, got an empty sequence")
        sizes = None if images is None else [tuple(np.shape(im)[:2]) for im in images]
        if sizes is not None and len(sizes) != len(ids):
            raise ValueError(f"ids: expected one id per image ({len(sizes)}), got {len(ids)}")
        arrays = []
        channels = (self.num_classes, 1) if self.num_classes == 2 else (self.num_classes,)
        for i, image_id in enumerate(ids):
            f = self.path(image_id)
            if not f.is_file():
                raise ValueError(f"ids: expected a file {str(f)!r} for id {image_id!r}, got none")
            a = np.load(f)
            if a.ndim != 3 or a.shape[0] not in channels:
                raise ValueError(f"{f}: expected shape [{self.num_classes}, H, W], got {a.shape}")
            if sizes is not None and tuple(a.shape[1:]) != tuple(sizes[i]):
                raise ValueError(f"{f}: expected H, W = {tuple(sizes[i])} (the image size), got {a.shape[1:]}")
            arrays.append(a)
        shapes = {a.shape for a in arrays}
        if len(shapes) != 1:
            raise ValueError(f"ids: expected arrays of one size per batch, got shapes {sorted(shapes)}")
        name = f"precomputed probabilities in {str(self.folder)!r}"
        y = to_tensor(np.stack(arrays), name)
        check_raw(y, len(ids), self.num_classes, tuple(y.shape[2:]), name)
        return to_probabilities(y, self.output, self.num_classes, name)
