"""Dataset layouts as presets: where images and masks live, how they pair, what mask values mean.

- ``index`` (default): ``root/images`` + ``root/masks`` (or explicit folders); a mask is an index PNG
  (or VOC palette / RGB colour PNG) named like its image with the extension replaced, values = class ids,
  255 = ignore. A scan's maps folder (``maps/<model>/<stem>.png``, legacy ``<id>.png``) is such a folder.
- ``voc``: PASCAL VOC (``JPEGImages``, ``SegmentationClass`` palette PNGs, ``ImageSets/Segmentation/
  <split>.txt``); the 21 VOC classes, 255 = void. Images without a mask are left out (VOC has more
  images than masks).
- ``cityscapes``: ``leftImg8bit/<split>/<city>/<x>_leftImg8bit.png`` with ``gtFine/<split>/<city>/
  <x>_gtFine_labelTrainIds.png`` (used when present) or ``<x>_gtFine_labelIds.png`` mapped id -> trainId;
  the 19 train classes, 255 = ignore.
- ``ade20k``: ADEChallengeData2016 (``images/<split>``, ``annotations/<split>``); reduce-zero-label:
  mask value 0 ("other") -> ignore, class c is stored as c + 1 (value 150 is class 149, "flag").
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blindspots.data.classes import DEFAULT_IGNORE_INDEX, Classes

__all__ = ["LAYOUTS", "Layout", "VOC_CLASSES", "CITYSCAPES_CLASSES", "ADE20K_CLASSES", "CITYSCAPES_ID_TO_TRAINID",
           "ade20k_label_map", "resolve_layout"]

LAYOUTS = ("index", "voc", "cityscapes", "ade20k")

VOC_CLASSES = Classes(("background", "aeroplane", "bicycle", "bird", "boat", "bottle", "bus", "car", "cat",
                       "chair", "cow", "diningtable", "dog", "horse", "motorbike", "person", "pottedplant",
                       "sheep", "sofa", "train", "tvmonitor"))

_CITYSCAPES = (  # (trainId name, colour, labelIds that map to it) from cityscapesScripts' labels.py
    ("road", (128, 64, 128), (7,)), ("sidewalk", (244, 35, 232), (8,)), ("building", (70, 70, 70), (11,)),
    ("wall", (102, 102, 156), (12,)), ("fence", (190, 153, 153), (13,)), ("pole", (153, 153, 153), (17,)),
    ("traffic light", (250, 170, 30), (19,)), ("traffic sign", (220, 220, 0), (20,)),
    ("vegetation", (107, 142, 35), (21,)), ("terrain", (152, 251, 152), (22,)), ("sky", (70, 130, 180), (23,)),
    ("person", (220, 20, 60), (24,)), ("rider", (255, 0, 0), (25,)), ("car", (0, 0, 142), (26,)),
    ("truck", (0, 0, 70), (27,)), ("bus", (0, 60, 100), (28,)), ("train", (0, 80, 100), (31,)),
    ("motorcycle", (0, 0, 230), (32,)), ("bicycle", (119, 11, 32), (33,)),
)
CITYSCAPES_CLASSES = Classes(tuple(n for n, _, _ in _CITYSCAPES),
                             palette=np.array([c for _, c, _ in _CITYSCAPES], dtype=np.uint8))
#: uint8 [256]: Cityscapes labelId -> trainId; every id that is not a train class -> 255
CITYSCAPES_ID_TO_TRAINID = np.full(256, DEFAULT_IGNORE_INDEX, dtype=np.uint8)
for _train_id, (_, _, _ids) in enumerate(_CITYSCAPES):
    CITYSCAPES_ID_TO_TRAINID[list(_ids)] = _train_id

ADE20K_CLASSES = Classes((
    "wall", "building", "sky", "floor", "tree", "ceiling", "road", "bed", "windowpane", "grass", "cabinet",
    "sidewalk", "person", "earth", "door", "table", "mountain", "plant", "curtain", "chair", "car", "water",
    "painting", "sofa", "shelf", "house", "sea", "mirror", "rug", "field", "armchair", "seat", "fence", "desk",
    "rock", "wardrobe", "lamp", "bathtub", "railing", "cushion", "base", "box", "column", "signboard",
    "chest of drawers", "counter", "sand", "sink", "skyscraper", "fireplace", "refrigerator", "grandstand",
    "path", "stairs", "runway", "case", "pool table", "pillow", "screen door", "stairway", "river", "bridge",
    "bookcase", "blind", "coffee table", "toilet", "flower", "book", "hill", "bench", "countertop", "stove",
    "palm", "kitchen island", "computer", "swivel chair", "boat", "bar", "arcade machine", "hovel", "bus",
    "towel", "light", "truck", "tower", "chandelier", "awning", "streetlight", "booth", "television receiver",
    "airplane", "dirt track", "apparel", "pole", "land", "bannister", "escalator", "ottoman", "bottle",
    "buffet", "poster", "stage", "van", "ship", "fountain", "conveyer belt", "canopy", "washer", "plaything",
    "swimming pool", "stool", "barrel", "basket", "waterfall", "tent", "bag", "minibike", "cradle", "oven",
    "ball", "food", "step", "tank", "trade name", "microwave", "pot", "animal", "bicycle", "lake",
    "dishwasher", "screen", "blanket", "sculpture", "hood", "sconce", "vase", "traffic light", "tray",
    "ashcan", "fan", "pier", "crt screen", "plate", "monitor", "bulletin board", "shower", "radiator",
    "glass", "clock", "flag",
))


def ade20k_label_map(ignore_index: int = DEFAULT_IGNORE_INDEX) -> np.ndarray:
    """uint8 [256] reduce-zero-label lookup: 0 -> ignore_index, v -> v - 1 (255 stays ignore)."""
    lut = (np.arange(256, dtype=np.int64) - 1) % 256
    lut[0] = lut[255] = ignore_index  # raw 0 ("other") and a raw 255 (never a class) are ignored
    return lut.astype(np.uint8)


@dataclass(frozen=True)
class Layout:
    """Everything `SegmentationSet` needs to read one dataset layout (see the module docstring)."""

    images_dir: Path
    masks_dir: Path
    classes: Classes | None
    mask_suffix: str = ".png"
    image_suffix: str | None = None
    label_map: np.ndarray | None = None
    ids: object = None
    masks_only: bool = False  # pair every mask that has an image; images without a mask are left out


def _sub(root: Path, *names: str | None) -> Path:
    """root/names... keeping only the parts that exist (a user's copy may be flattened)."""
    out = root
    for n in names:
        if n and (out / n).is_dir():
            out = out / n
    return out


def _split_ids(root: Path, ids: object) -> object:
    """VOC: a split name ('train', 'val', 'trainval') -> its ImageSets/Segmentation list file."""
    if isinstance(ids, str) and "/" not in ids and not ids.endswith(".txt"):
        listing = root / "ImageSets" / "Segmentation" / f"{ids}.txt"
        if listing.is_file():
            return listing
    return ids


def _cityscapes_masks(masks_dir: Path) -> tuple[str, np.ndarray | None]:
    """Prefer ready trainIds masks; else labelIds with the id -> trainId map."""
    for p in masks_dir.rglob("*_labelTrainIds.png"):
        suffix = "_gtFine_labelTrainIds.png" if p.name.endswith("_gtFine_labelTrainIds.png") else "_labelTrainIds.png"
        return suffix, None
    for p in masks_dir.rglob("*_labelIds.png"):
        suffix = "_gtFine_labelIds.png" if p.name.endswith("_gtFine_labelIds.png") else "_labelIds.png"
        return suffix, CITYSCAPES_ID_TO_TRAINID
    raise ValueError(f"masks: expected Cityscapes masks '*_gtFine_labelTrainIds.png' or '*_gtFine_labelIds.png' "
                     f"under {masks_dir}, found none")


def resolve_layout(root: str | Path, layout: str = "index", *, split: str | None = None,
                   images: str | Path | None = None, masks: str | Path | None = None,
                   classes: Classes | None = None, ids: object = None) -> Layout:
    """The folders, suffixes, value map and classes of `layout` under `root`.

    images / masks: explicit folders (relative to root, or absolute) instead of the layout's.
    classes: overrides the preset's classes (names, colours, ignore value). ids: kept as given, except a
    VOC split name ('val') which becomes its list file.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {list(LAYOUTS)}, got {layout!r}")
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"root: expected an existing dataset folder, got {str(root)!r}")

    def given(p: str | Path | None, default: Path) -> Path:
        return default if p is None else (Path(p) if Path(p).is_absolute() else root / p)

    if layout == "index":
        return Layout(given(images, _sub(root / "images", split)), given(masks, _sub(root / "masks", split)),
                      classes, ids=ids)
    if layout == "voc":
        root = _sub(root, "VOC2012")  # VOCdevkit/ or VOCdevkit/VOC2012/
        return Layout(given(images, root / "JPEGImages"), given(masks, root / "SegmentationClass"),
                      classes or VOC_CLASSES, ids=_split_ids(root, ids if ids is not None else split),
                      masks_only=True)
    if layout == "cityscapes":
        images_dir = given(images, _sub(root, "leftImg8bit", split))
        masks_dir = given(masks, _sub(root, "gtFine", split))
        suffix, label_map = _cityscapes_masks(masks_dir)
        return Layout(images_dir, masks_dir, classes or CITYSCAPES_CLASSES, mask_suffix=suffix,
                      image_suffix="_leftImg8bit.png", label_map=label_map, ids=ids)
    split = {"train": "training", "val": "validation"}.get(split or "", split)
    root = _sub(root, "ADEChallengeData2016")
    ign = DEFAULT_IGNORE_INDEX if classes is None or classes.ignore_index is None else classes.ignore_index
    return Layout(given(images, _sub(root, "images", split)), given(masks, _sub(root, "annotations", split)),
                  classes or ADE20K_CLASSES, label_map=ade20k_label_map(ign), ids=ids)
