"""`SourceSegmentationSet`: a labelled set whose images come from a pool source (an object store, Parquet or
WebDataset shards, ...) and whose masks are index PNGs in a local folder, paired by the id rule.

A mask `<stem>.png` belongs to the image whose id without its extension is `<stem>`
(`blindspots.ids.stem_key`: 'a/cat.jpg' -> 'a/cat.png'; 'train.parquet#000017' -> 'train.parquet#000017.png'),
as a scan's maps and a project's masks are named. The face is `SegmentationSet`'s: `ids`, `classes`,
`load(id)` / `self[i]` -> (image uint8 [H, W, 3], mask uint8 [H, W]), `mask_path(id)`.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from blindspots.data.segsets import decode_mask
from blindspots.data.sources.base import PoolSource
from blindspots.ids import stem_key

__all__ = ["SourceSegmentationSet"]


class SourceSegmentationSet:
    """Images from `source`, masks `<stem><mask_suffix>` under `masks_dir`; ids: the source's ids that have a mask
    (or `ids`, each needing both). classes: the label space (for RGB masks and value checks)."""

    def __init__(self, source: PoolSource, masks_dir: str | Path, *, classes: Any = None, mask_suffix: str = ".png",
                 ids: Sequence[str] | None = None) -> None:
        self.source, self.classes, self.mask_suffix = source, classes, mask_suffix
        self.masks_dir = Path(masks_dir).resolve()
        if not self.masks_dir.is_dir():
            raise ValueError(f"masks_dir: expected an existing folder, got {str(masks_dir)!r}")
        masks = {}
        for folder, dirs, files in os.walk(self.masks_dir):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in files:
                if name.endswith(mask_suffix) and not name.startswith("."):
                    rel = Path(folder, name).relative_to(self.masks_dir).as_posix()
                    masks[rel[:-len(mask_suffix)]] = rel
        by_stem = {stem_key(i): i for i in source.ids}
        if ids is None:
            chosen = sorted(by_stem[s] for s in masks if s in by_stem)
        else:
            chosen = sorted(str(i) for i in ids)
            missing = [i for i in chosen if i not in source or stem_key(i) not in masks]
            if missing:
                raise ValueError(f"ids: expected ids with both an image in {source.root!r} and a mask in "
                                 f"{str(self.masks_dir)!r}, got {len(missing)} without, e.g. {missing[:5]}")
        if not chosen:
            raise ValueError(f"masks_dir: expected masks named like the images of {source.root!r} (<id without "
                             f"extension>{mask_suffix}) in {str(self.masks_dir)!r}, got none that pair")
        self._masks = {i: masks[stem_key(i)] for i in chosen}
        self.ids: list[str] = chosen

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"SourceSegmentationSet(images={self.source.root!r}, masks={str(self.masks_dir)!r}, n={len(self)})"

    def mask_path(self, item_id: str) -> Path:
        if item_id not in self._masks:
            raise ValueError(f"item_id: expected an id of this set, got {item_id!r}")
        return self.masks_dir / self._masks[item_id]

    def load(self, item_id: str) -> tuple[np.ndarray, np.ndarray]:
        """(image uint8 [H, W, 3], mask uint8 [H, W]); ValueError if their sizes differ."""
        mask = decode_mask(self.mask_path(item_id), classes=self.classes)
        image = self.source.load(item_id)
        if image.shape[:2] != mask.shape:
            raise ValueError(f"mask: expected the image size {image.shape[:2]} for {item_id!r}, got {mask.shape}")
        return image, mask

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise ValueError(f"index: expected an integer position, got {type(index).__name__}")
        return self.load(self.ids[int(index)])

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for item_id in self.ids:
            yield self.load(item_id)
