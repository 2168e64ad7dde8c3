"""Index and colour-coded PNG masks (PASCAL VOC style).

An index mask is uint8 [H, W]: class ids 0..C-1, `ignore_index` (255) for unlabeled pixels.
On disk it is a palette ('P') PNG whose pixel values are the class ids and whose palette
shows the class colours (VOC's layout), or a greyscale ('L') PNG. Colour-coded RGB PNGs are
read through `classes.palette` (plus VOC's void colour 224,224,192 for ignore).

Public API (stable): `read_mask(source, *, classes=None)`, `write_mask(path, mask, *,
classes=None)`, `write_color_mask(path, mask, classes)`, `read_masks(folder, ids=None, *,
classes=None, suffix=".png")`, `write_masks(folder, masks, *, classes=None, suffix=".png")`,
`mask_filename(image_id, suffix=".png")`.
"""
from __future__ import annotations

import io
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping

import numpy as np
from PIL import Image

from blindspots.data.classes import DEFAULT_IGNORE_INDEX, Classes, voc_palette

VOID_COLOR = (224, 224, 192)  # VOC's colour for the ignore label 255


def _palette_for(classes: Classes | None) -> np.ndarray:
    """uint8 [256, 3]: class colours first, VOC colours after, the void colour at 255."""
    pal = voc_palette(256)
    if classes is not None:
        pal[: classes.num_classes] = classes.palette
    pal[255] = VOID_COLOR
    return pal


def check_mask(mask: np.ndarray, classes: Classes | None = None, name: str = "mask") -> np.ndarray:
    """Validate an index mask (int [H, W], values < C or == ignore_index) -> uint8 [H, W]."""
    m = np.asarray(mask)
    if m.ndim != 2 or m.size == 0:
        raise ValueError(f"{name}: expected an int [H, W] index mask, got shape {m.shape}")
    if not np.issubdtype(m.dtype, np.integer):
        raise ValueError(f"{name}: expected an integer dtype, got {m.dtype}")
    if m.min() < 0 or m.max() > 255:
        raise ValueError(f"{name}: expected values in 0..255, got {int(m.min())}..{int(m.max())}")
    if classes is not None:
        ignore = classes.ignore_index if classes.ignore_index is not None else -1
        bad = (m >= classes.num_classes) & (m != ignore)
        if bad.any():
            raise ValueError(f"{name}: expected class ids 0..{classes.num_classes - 1} or {ignore}, "
                             f"got {int(m[bad][0])}")
    return m.astype(np.uint8, copy=False)


def rgb_to_index(rgb: np.ndarray, colors: Mapping[tuple[int, int, int], int], name: str = "mask") -> np.ndarray:
    """Colour-coded uint8 [H, W, 3] -> uint8 [H, W] through `colors` (RGB -> id); unknown colours raise."""
    rgb = np.asarray(rgb)[..., :3].astype(np.uint32)
    code = (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
    keys = np.array([(r << 16) | (g << 8) | b for (r, g, b) in colors], dtype=np.uint32)
    vals = np.array(list(colors.values()), dtype=np.uint8)
    order = np.argsort(keys)
    keys, vals = keys[order], vals[order]
    pos = np.clip(np.searchsorted(keys, code), 0, len(keys) - 1)
    found = keys[pos] == code
    if not found.all():
        c = int(code[~found][0])
        raise ValueError(f"{name}: expected only the colours of the known classes, got colour "
                         f"({c >> 16}, {(c >> 8) & 255}, {c & 255}) in {int((~found).sum())} pixels")
    return vals[pos]


def read_mask(source: str | Path | bytes, *, classes: Classes | None = None) -> np.ndarray:
    """Read an index mask (P / L / 16-bit PNG) or an RGB colour-coded one (needs `classes`).

    Returns uint8 [H, W]. Values are checked against `classes` when given.
    """
    where = "source" if isinstance(source, bytes) else str(source)
    try:
        with Image.open(io.BytesIO(source) if isinstance(source, bytes) else source) as im:
            im.load()
            mode = im.mode
            arr = np.asarray(im)
    except (OSError, SyntaxError) as exc:
        raise ValueError(f"source: expected a readable mask image, got {where!r} ({exc})") from None
    if mode in ("P", "L", "I", "I;16", "I;16B", "I;16L"):
        arr = arr.astype(np.int64)
        if arr.min() < 0 or arr.max() > 255:
            raise ValueError(f"source: expected mask values 0..255, got {arr.min()}..{arr.max()} in {where!r}")
        return check_mask(arr.astype(np.uint8), classes, name=f"mask {where!r}")
    if mode in ("RGB", "RGBA"):
        if classes is None:
            raise ValueError(f"classes: expected Classes to decode the colour-coded mask {where!r}, got None")
        colors = {tuple(int(x) for x in c): k for k, c in enumerate(classes.palette)}
        if classes.ignore_index is not None:
            colors.setdefault(VOID_COLOR, classes.ignore_index)
        if len(colors) < classes.num_classes + (classes.ignore_index is not None):
            raise ValueError("classes: expected a distinct palette colour per class to decode colour masks")
        return rgb_to_index(arr, colors, name=f"mask {where!r}")
    raise ValueError(f"source: expected a P, L or RGB mask image, got mode {mode!r} in {where!r}")


def write_mask(path: str | Path, mask: np.ndarray, *, classes: Classes | None = None) -> Path:
    """Write uint8 [H, W] as a palette PNG (pixel values = class ids; VOC-style colours)."""
    m = check_mask(mask, classes)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    im = Image.frombytes("P", (m.shape[1], m.shape[0]), np.ascontiguousarray(m).tobytes())  # values kept exactly
    im.putpalette(_palette_for(classes).ravel().tolist())
    im.save(path, format="PNG")
    return path


def write_color_mask(path: str | Path, mask: np.ndarray, classes: Classes) -> Path:
    """Write uint8 [H, W] as an RGB PNG coloured by `classes.palette` (void colour for ignore)."""
    m = check_mask(mask, classes)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(_palette_for(classes)[m]).save(path, format="PNG")
    return path


def mask_filename(image_id: str, suffix: str = ".png") -> str:
    """Relative mask path for an image id: extension replaced by `suffix`; ids may not leave the folder."""
    p = PurePosixPath(str(image_id))
    if not str(image_id) or p.is_absolute() or ".." in p.parts:
        raise ValueError(f"image_id: expected a relative path inside the folder, got {image_id!r}")
    return str(p.with_suffix(suffix)) if p.suffix else str(p) + suffix


def write_masks(folder: str | Path, masks: Mapping[str, np.ndarray], *, classes: Classes | None = None,
                suffix: str = ".png") -> list[Path]:
    """Write one palette PNG per image id under `folder` (subfolders of ids kept)."""
    folder = Path(folder)
    return [write_mask(folder / mask_filename(i, suffix), m, classes=classes) for i, m in masks.items()]


def read_masks(folder: str | Path, ids: Iterable[str] | None = None, *, classes: Classes | None = None,
               suffix: str = ".png") -> dict[str, np.ndarray]:
    """Read masks for `ids` (None: every `*{suffix}` under folder, keyed by relative path
    without suffix) -> {id: uint8 [H, W]}. A missing file raises ValueError naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder: expected a directory of masks, got {str(folder)!r}")
    if ids is None:
        found = sorted(p for p in folder.rglob(f"*{suffix}") if p.is_file())
        return {p.relative_to(folder).as_posix()[: -len(suffix)]: read_mask(p, classes=classes) for p in found}
    out = {}
    for i in ids:
        p = folder / mask_filename(i, suffix)
        if not p.is_file():
            raise ValueError(f"ids: expected a mask file {str(p)!r} for image {i!r}, got no such file")
        out[i] = read_mask(p, classes=classes)
    return out


__all__ = ["read_mask", "write_mask", "write_color_mask", "read_masks", "write_masks", "mask_filename",
           "check_mask", "rgb_to_index", "VOID_COLOR", "DEFAULT_IGNORE_INDEX"]
