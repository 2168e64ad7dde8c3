"""Labelled segmentation sets: an image folder and a mask folder paired by relative path stem.

`images/a/b.jpg` pairs with `masks/a/b.png` (mask_suffix ".png"); the pair's id is the stem
path `a/b`. Masks are read as:

- index PNGs ('L', 'P', '1', or 16-bit 'I;16'/'I' with values ≤ 255): the values are the class
  ids, `ignore_index` (255) for unlabeled pixels. A VOC palette PNG ('P') gives its indices
  directly; its palette is not used.
- colour-coded RGB/RGBA PNGs: each colour is mapped through `classes.palette`; white
  (255, 255, 255) and the VOC void colour (224, 224, 192) map to `classes.ignore_index`
  unless a class uses that colour. Any other colour is a ValueError naming the file and colour.

Masks pair with images by the one id rule (`blindspots.ids`): `a/b.jpg` pairs with `a/b.png`, and a
legacy `a/b.jpg.png` (old scan maps) is found too, so a scan's maps folder can serve as masks. Symlinked
files and folders are followed (a dangling link is logged and left out).

Dataset layouts (VOC, Cityscapes, ADE20K, a classes file) are presets of `open_segset`, see
`blindspots.data.layouts`: `open_segset("VOC2012", layout="voc", ids="val")`.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path, PurePosixPath
from typing import Callable, Iterator, Sequence

import numpy as np

from blindspots.data.classes import Classes
from blindspots.data.classfile import read_classes
from blindspots.data.layouts import LAYOUTS, resolve_layout
from blindspots.data.sources.decode import DEFAULT_MAX_PIXELS, decode_image, open_image, pillow_extensions

log = logging.getLogger(__name__)

WHITE = (255, 255, 255)
VOC_VOID = (224, 224, 192)
_EXAMPLES = 5

__all__ = ["SegmentationSet", "open_segset", "decode_mask", "LAYOUTS", "WHITE", "VOC_VOID"]


def _key(rgb: np.ndarray) -> np.ndarray:
    """uint8 [..., 3] -> int64 [...] packed colour keys."""
    rgb = rgb.astype(np.int64)
    return (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]


def _colour_lut(classes: Classes) -> dict[int, int]:
    """Packed colour -> class id (or ignore_index for white / VOC void)."""
    keys = _key(classes.palette).tolist()
    if len(set(keys)) != len(keys):
        dup = sorted({tuple(c) for c, k in zip(classes.palette.tolist(), keys) if keys.count(k) > 1})
        raise ValueError(f"classes: expected distinct palette colours to decode RGB masks, got duplicates {dup[:_EXAMPLES]}")
    lut = {}
    if classes.ignore_index is not None:
        lut = {int(_key(np.array(c, dtype=np.uint8))): classes.ignore_index for c in (WHITE, VOC_VOID)}
    lut.update({k: i for i, k in enumerate(keys)})  # a class colour wins over a void colour
    return lut


def _map_colours(rgb: np.ndarray, classes: Classes, label: str) -> np.ndarray:
    """uint8 [H, W, 3] colour-coded mask -> uint8 [H, W] class ids."""
    lut = _colour_lut(classes)
    uniq, inverse = np.unique(_key(rgb).ravel(), return_inverse=True)
    unknown = [k for k in uniq.tolist() if k not in lut]
    if unknown:
        colours = [((k >> 16) & 255, (k >> 8) & 255, k & 255) for k in unknown[:_EXAMPLES]]
        raise ValueError(
            f"mask: expected colours of classes.palette (or white / VOC void {VOC_VOID} for ignore) in "
            f"{label}, got {len(unknown)} unknown colour(s), e.g. {colours}"
        )
    ids = np.array([lut[k] for k in uniq.tolist()], dtype=np.uint8)
    return ids[inverse].reshape(rgb.shape[:2])


def decode_mask(source: str | Path, *, classes: Classes | None = None,
                max_pixels: int = DEFAULT_MAX_PIXELS) -> np.ndarray:
    """Read one mask file to uint8 [H, W] class ids (rules in the module docstring).

    classes: needed for RGB colour-coded masks; when given, values are also checked to be
    class ids or classes.ignore_index. Raises ImageDecodeError for an unreadable file and
    ValueError for a readable one with invalid content.
    """
    label = str(source)
    img = open_image(source, max_pixels=max_pixels)  # same checks and EXIF rule as the images
    mode = img.mode
    if mode in ("L", "P"):
        mask = np.asarray(img, dtype=np.uint8)
    elif mode == "1":
        mask = np.asarray(img).astype(np.uint8)
    elif mode in ("LA", "PA"):
        mask = np.asarray(img.getchannel(0), dtype=np.uint8)
    elif mode.startswith("I"):
        values = np.asarray(img).astype(np.int64)
        if values.size and (values.min() < 0 or values.max() > 255):
            raise ValueError(f"mask: expected 16-bit index values in 0..255 in {label}, "
                             f"got range {values.min()}..{values.max()}")
        mask = values.astype(np.uint8)
    elif mode in ("RGB", "RGBA"):
        if classes is None:
            raise ValueError(f"classes: expected Classes (with a palette) to map the colours of the RGB "
                             f"mask {label}, got None; give a classes file with one colour per class "
                             f"(--classes FILE, e.g. lines 'road 128 64 128'), or save the masks as index PNGs")
        mask = _map_colours(np.asarray(img.convert("RGB"), dtype=np.uint8), classes, label)
    else:
        raise ValueError(f"mask: expected an index ('L'/'P') or RGB PNG in {label}, got mode {mode!r}")
    return _check_values(mask, classes, label)


def _check_values(mask: np.ndarray, classes: Classes | None, label: str) -> np.ndarray:
    """uint8 [H, W] checked to hold class ids of `classes` or its ignore_index (no check without classes)."""
    if classes is not None:
        bad = (mask >= classes.num_classes)
        if classes.ignore_index is not None:
            bad &= mask != classes.ignore_index
        if bad.any():
            vals = np.unique(mask[bad])[:_EXAMPLES].tolist()
            raise ValueError(f"mask: expected class ids 0..{classes.num_classes - 1} or ignore "
                             f"{classes.ignore_index} in {label}, got values {vals}")
    return np.ascontiguousarray(mask)


def _stem(rel: str, suffix: str | None = None) -> str:
    p = PurePosixPath(rel)
    if suffix is not None:
        return rel[: -len(suffix)]
    return str(p.with_suffix("")) if p.suffix else rel


def _examples(items: Sequence[str]) -> str:
    shown = ", ".join(repr(i) for i in list(items)[:_EXAMPLES])
    more = f" and {len(items) - _EXAMPLES} more" if len(items) > _EXAMPLES else ""
    return shown + more


def _list_files(root: Path, keep: Callable[[str], bool]) -> tuple[list[str], dict[str, str]]:
    """Relative POSIX paths of the files under root that `keep(name)` accepts, following symlinked files
    and folders (each real folder once); returns (sorted paths, {path: reason} of links left out)."""
    found: list[str] = []
    excluded: dict[str, str] = {}
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a link cycle or a folder linked twice
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        for name in filenames:
            if name.startswith(".") or not keep(name):
                continue
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if not path.is_file():
                excluded[rel] = "dangling symlink"
                continue
            found.append(rel)
    if excluded:
        log.warning("%s: %d file(s) left out: %s", root, len(excluded), _examples(sorted(excluded)))
    return sorted(found), excluded


class SegmentationSet:
    """Image + mask folder pairs, indexable like a sequence (usable as a torch Dataset).

    images_dir: folder tree of images (any format Pillow reads; decoded like the pool: EXIF,
        grey/RGBA/16-bit → RGB uint8). masks_dir: folder tree of masks; may equal images_dir.
    classes: the label space; needed for RGB colour-coded masks, and when given, mask values
        are checked against it.
    mask_suffix: what replaces an image's extension to name its mask (".png", or e.g.
        "_mask.png", Cityscapes' "_gtFine_labelIds.png").
    image_suffix: what ends an image's name and is cut to get its id (None: the extension;
        Cityscapes: "_leftImg8bit.png"); other files are not images of this set.
    label_map: uint8 [256] lookup applied to the raw mask values (Cityscapes labelId -> trainId,
        ADE20K reduce-zero-label) before they are checked against `classes`.
    ids: optional subset — a sequence of stem ids (an id with its extension is accepted) or a list
        file (one per line, '#' comments), e.g. VOC's ImageSets/Segmentation/train.txt. Without it,
        every image must have a mask and every mask an image; with it, only the listed ids must.
    masks_only: without ids, use every mask that has an image and leave out images without a mask
        (VOC's JPEGImages holds more images than SegmentationClass masks).
    max_pixels: per-image pixel limit (50 M by default).

    Attributes: `ids` (sorted stem ids, POSIX), `classes`. `load(id)` / `self[i]` give
    (image uint8 [H, W, 3], mask uint8 [H, W]).
    """

    def __init__(self, images_dir: str | Path, masks_dir: str | Path, *, classes: Classes | None = None,
                 mask_suffix: str = ".png", ids: Sequence[str] | str | Path | None = None,
                 max_pixels: int = DEFAULT_MAX_PIXELS, image_suffix: str | None = None,
                 label_map: np.ndarray | None = None, masks_only: bool = False) -> None:
        if classes is not None and not isinstance(classes, Classes):
            raise ValueError(f"classes: expected a blindspots Classes or None, got {type(classes).__name__}")
        if not isinstance(mask_suffix, str) or "/" in mask_suffix or not PurePosixPath("x" + mask_suffix).suffix:
            raise ValueError(f"mask_suffix: expected a file-name ending with an extension, such as '.png' or '_mask.png', got {mask_suffix!r}")
        if not Path(masks_dir).is_dir():
            raise ValueError(f"masks_dir: expected an existing folder, got {str(masks_dir)!r}")
        if not Path(images_dir).is_dir():
            raise ValueError(f"images_dir: expected an existing folder, got {str(images_dir)!r}")
        if image_suffix is not None and (not isinstance(image_suffix, str) or "/" in image_suffix
                                         or not PurePosixPath("x" + image_suffix).suffix):
            raise ValueError(f"image_suffix: expected None or a file-name ending such as '_leftImg8bit.png', "
                             f"got {image_suffix!r}")
        if label_map is not None:
            label_map = np.asarray(label_map)
            if label_map.shape != (256,) or label_map.dtype != np.uint8:
                raise ValueError(f"label_map: expected a uint8 [256] lookup table, got {label_map.dtype} "
                                 f"{label_map.shape}")
        self.classes = classes
        self.mask_suffix, self.image_suffix, self.label_map = mask_suffix, image_suffix, label_map
        self.max_pixels = max_pixels
        self.images_dir, self.masks_dir = Path(images_dir).resolve(), Path(masks_dir).resolve()
        exts = pillow_extensions()
        image_files, self.excluded = _list_files(
            self.images_dir, (lambda n: n.endswith(image_suffix)) if image_suffix else
            (lambda n: PurePosixPath(n).suffix.lower() in exts))
        mask_files, excluded = _list_files(self.masks_dir, lambda n: n.endswith(mask_suffix))
        self.excluded.update({f"masks/{k}": v for k, v in excluded.items()})

        masks = {_stem(m, mask_suffix): m for m in mask_files}
        same_dir = self.images_dir == self.masks_dir
        images: dict[str, str] = {}
        clashes: list[str] = []
        for rel in image_files:
            if same_dir and rel.endswith(mask_suffix) and _stem(rel, mask_suffix) in masks:
                continue  # it is a mask, not an image
            stem = _stem(rel, image_suffix)
            if stem in images:
                clashes.append(f"{images[stem]} / {rel}")
            images[stem] = rel
        if clashes:
            raise ValueError(f"images_dir: expected one image per name, got {len(clashes)} names with several "
                             f"files: {_examples(clashes)}")
        # legacy artifacts named id + ".png" ("cat.jpg.png", old scan maps): pair with the image "cat.jpg"
        by_rel = {rel: stem for stem, rel in images.items()}
        for key in [k for k in masks if k not in images and k in by_rel]:
            masks.setdefault(by_rel[key], masks[key])
            del masks[key]
        self._image_rel, self._mask_rel = images, masks
        if ids is None and masks_only:
            ids = sorted(set(masks) & set(images))
        self.ids: list[str] = self._pair(images, masks, ids)
        log.info("segmentation set %s: %d pairs", self.images_dir, len(self.ids))

    def _pair(self, images: dict[str, str], masks: dict[str, str],
              ids: Sequence[str] | str | Path | None) -> list[str]:
        if ids is None:
            no_mask = sorted(set(images) - set(masks))
            no_image = sorted(set(masks) - set(images))
            if no_mask or no_image:
                parts = []
                if no_mask:
                    parts.append(f"{len(no_mask)} image(s) without a mask '<id>{self.mask_suffix}' in "
                                 f"{self.masks_dir}: {_examples(no_mask)}")
                if no_image:
                    parts.append(f"{len(no_image)} mask(s) without an image in {self.images_dir}: "
                                 f"{_examples(no_image)}")
                raise ValueError("masks_dir: expected one mask per image, got " + "; ".join(parts)
                                 + " (pass ids=... or, on the command line, --ids FILE with one id per line, "
                                   "to use a subset)")
            chosen = sorted(images)
        else:
            chosen = sorted({i if i in images else _stem(i) if _stem(i) in images else i
                             for i in self._read_ids(ids)})
            missing = [i for i in chosen if i not in images or i not in masks]
            if missing:
                raise ValueError(f"ids: expected ids with both an image and a mask, got {len(missing)} without: "
                                 f"{_examples(missing)}")
        if not chosen:
            raise ValueError(f"images_dir: expected at least one image with a mask, found none in "
                             f"{self.images_dir}")
        return chosen

    @staticmethod
    def _read_ids(ids: Sequence[str] | str | Path) -> list[str]:
        if isinstance(ids, (str, Path)):
            path = Path(ids)
            if not path.is_file():
                raise ValueError(f"ids: expected a list of ids or a list file, got missing file {str(ids)!r}")
            lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines()]
            return [ln for ln in lines if ln and not ln.startswith("#")]
        out = list(ids)
        if not all(isinstance(i, str) for i in out):
            raise ValueError("ids: expected a sequence of string ids")
        return out

    # -- access --

    def __len__(self) -> int:
        return len(self.ids)

    def __repr__(self) -> str:
        return f"SegmentationSet(images={str(self.images_dir)!r}, masks={str(self.masks_dir)!r}, n={len(self)})"

    def _check_id(self, item_id: str) -> None:
        if item_id not in self._image_rel or item_id not in self._mask_rel:
            raise ValueError(f"item_id: expected an id of this set, got {item_id!r}")

    def image_path(self, item_id: str) -> Path:
        self._check_id(item_id)
        return self.images_dir / self._image_rel[item_id]

    def mask_path(self, item_id: str) -> Path:
        self._check_id(item_id)
        return self.masks_dir / self._mask_rel[item_id]

    def load_mask(self, item_id: str) -> np.ndarray:
        """uint8 [H, W] class ids (ignore_index for unlabeled pixels), after `label_map`."""
        if self.label_map is None:
            return decode_mask(self.mask_path(item_id), classes=self.classes, max_pixels=self.max_pixels)
        raw = decode_mask(self.mask_path(item_id), max_pixels=self.max_pixels)
        return _check_values(self.label_map[raw], self.classes, str(self.mask_path(item_id)))

    def load(self, item_id: str) -> tuple[np.ndarray, np.ndarray]:
        """(image uint8 [H, W, 3], mask uint8 [H, W]) of one pair; ValueError if their sizes differ."""
        image = decode_image(self.image_path(item_id), max_pixels=self.max_pixels)
        mask = self.load_mask(item_id)
        if image.shape[:2] != mask.shape:
            raise ValueError(f"mask: expected the image size {image.shape[:2]} for {item_id!r} (after EXIF "
                             f"orientation), got {mask.shape}")
        return image, mask

    def __getitem__(self, index: int) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
            raise ValueError(f"index: expected an integer position, got {type(index).__name__}")
        n = len(self.ids)
        if not -n <= index < n:
            raise IndexError(f"index: expected -{n}..{n - 1}, got {index}")
        return self.load(self.ids[int(index)])

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for item_id in self.ids:
            yield self.load(item_id)


def open_segset(root: str | Path, *, layout: str = "index", ids: Sequence[str] | str | Path | None = None,
                classes: Classes | str | Path | None = None, split: str | None = None,
                images: str | Path | None = None, masks: str | Path | None = None,
                max_pixels: int = DEFAULT_MAX_PIXELS) -> SegmentationSet:
    """Open a labelled set laid out as `layout` (one of LAYOUTS; see `blindspots.data.layouts`).

    root: the dataset folder (index: holds images/ and masks/; voc: VOC2012/; cityscapes: holds
        leftImg8bit/ and gtFine/; ade20k: ADEChallengeData2016/).
    ids: a subset — ids, a list file, or for VOC a split name ('train', 'val', 'trainval').
    classes: a Classes or a classes file (`blindspots.data.classfile`); default: the layout's preset
        (none for index masks: values are taken as they are).
    split: a sub-folder of the layout ('train', 'val'; ADE20K's 'training'/'validation').
    images, masks: explicit folders (relative to root or absolute), e.g. a scan's maps/<model> as masks.
    Raises a one-line ValueError naming the layout and root when no image pairs with a mask (or any
    other problem), e.g. to check a project's [data] settings at init.
    """
    if classes is not None and not isinstance(classes, Classes):
        if not isinstance(classes, (str, Path)):
            raise ValueError(f"classes: expected a Classes, a classes file or None, got {type(classes).__name__}")
        classes = read_classes(classes)
    try:
        lay = resolve_layout(root, layout, split=split, images=images, masks=masks, classes=classes, ids=ids)
        return SegmentationSet(lay.images_dir, lay.masks_dir, classes=lay.classes, mask_suffix=lay.mask_suffix,
                               ids=lay.ids, max_pixels=max_pixels, image_suffix=lay.image_suffix,
                               label_map=lay.label_map, masks_only=lay.masks_only)
    except ValueError as e:
        if str(e).startswith("layout:"):
            raise
        raise ValueError(f"{e} (layout {layout!r}, root {str(root)!r})") from None
