"""CVAT "Segmentation Mask 1.1" export and import.

Layout of the zip (CVAT's documented format):

    labelmap.txt                     # label:color_rgb:parts:actions, one line per label
    ImageSets/Segmentation/default.txt   # image names without extension, one a line
    SegmentationClass/<name>.png     # RGB, each pixel the colour of its label
    SegmentationObject/<name>.png    # RGB, each connected object its own colour
    JPEGImages/<name>.png            # optional: the images themselves

CVAT treats the label `background` (0,0,0) as "no annotation". We therefore write
unlabeled pixels (ignore_index) as `background` — unless the classes themselves contain a
class named "background" (VOC), which then takes 0,0,0 and ignored pixels get their own
`ignore` label with VOC's void colour. Every other class gets its palette colour, made
unique and non-black if needed.

Public API (stable): `export_cvat(path, masks, classes, *, images=None) -> Path` and
`import_cvat(path, classes, *, ids=None) -> dict[id, uint8 [H, W]]`.
Export the target's predictions for S as `masks` to give annotators a pre-annotation.
"""
from __future__ import annotations

import io
import logging
import zipfile
from pathlib import Path, PurePosixPath
from typing import Iterable, Mapping

import numpy as np
from PIL import Image
from scipy import ndimage

from blindspots.data.classes import Classes, voc_palette
from blindspots.data.formats.masks import VOID_COLOR, check_mask, rgb_to_index

log = logging.getLogger(__name__)

LABELMAP_HEADER = "# label:color_rgb:parts:actions"


def _name(image_id: str) -> str:
    p = PurePosixPath(str(image_id))
    if not str(image_id) or p.is_absolute() or ".." in p.parts:
        raise ValueError(f"masks: expected image ids that are relative paths, got {image_id!r}")
    return str(p.with_suffix("")) if p.suffix else str(p)


def label_colors(classes: Classes) -> dict[str, tuple[int, int, int]]:
    """CVAT label -> RGB, every colour unique; 'background' is 0,0,0."""
    used = {(0, 0, 0), VOID_COLOR}
    out: dict[str, tuple[int, int, int]] = {"background": (0, 0, 0)}
    spare = iter(tuple(int(x) for x in c) for c in voc_palette(256)[1:255])
    for k, name in enumerate(classes.names):
        if name == "background":
            continue
        c = tuple(int(x) for x in classes.palette[k])
        while c in used:
            c = next(spare)
        used.add(c)
        out[name] = c
    if "background" in classes.names:
        out["ignore"] = VOID_COLOR
    return out


def _label_ids(classes: Classes) -> dict[str, int]:
    """CVAT label -> mask value."""
    ignore = classes.ignore_index if classes.ignore_index is not None else 255
    ids = {n: k for k, n in enumerate(classes.names)}
    ids.setdefault("background", ignore)
    ids.setdefault("ignore", ignore)
    return ids


def _png(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def _instances(mask: np.ndarray, ignore: int) -> np.ndarray:
    """uint8 RGB [H, W, 3]: each 4-connected object of a class gets its own VOC colour."""
    out = np.zeros(mask.shape, dtype=np.int64)
    nxt = 0
    for c in np.unique(mask):
        if c == ignore:
            continue
        lab, num = ndimage.label(mask == c)
        out[lab > 0] = lab[lab > 0] + nxt
        nxt += num
    pal = voc_palette(256)
    # more than 254 objects wrap around (CVAT reads instance colours, not their count)
    idx = np.where(out > 0, (out - 1) % 254 + 1, 0)
    return pal[idx]


def export_cvat(path: str | Path, masks: Mapping[str, np.ndarray], classes: Classes, *,
                images: Mapping[str, np.ndarray] | None = None) -> Path:
    """Write a CVAT Segmentation Mask 1.1 zip.

    masks: image id -> int [H, W] index mask (e.g. the target's prediction as pre-annotation).
    images: optional image id -> uint8 [H, W, 3], stored as JPEGImages/<name>.png.
    """
    if not masks:
        raise ValueError("masks: expected at least one mask, got none")
    if images is not None and not isinstance(images, Mapping):
        # a folder path used to pass silently (`id in "folder"` is a substring test) and export no image
        raise ValueError(f"images: expected a mapping image id -> uint8 [H, W, 3] array, got "
                         f"{type(images).__name__} {images!r:.80}")
    colors = label_colors(classes)
    ids = _label_ids(classes)
    value_color = np.zeros((256, 3), np.uint8)
    for label, c in colors.items():
        value_color[ids[label]] = c
    ignore = classes.ignore_index if classes.ignore_index is not None else 255
    names = [_name(i) for i in masks]
    if len(set(names)) != len(names):
        raise ValueError("masks: expected image ids that stay distinct without their extension")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("labelmap.txt", LABELMAP_HEADER + "\n"
                    + "".join(f"{n}:{c[0]},{c[1]},{c[2]}::\n" for n, c in colors.items()))
        zf.writestr("ImageSets/Segmentation/default.txt", "".join(n + "\n" for n in names))
        for (image_id, mask), name in zip(masks.items(), names):
            m = check_mask(mask, classes, name=f"masks[{image_id!r}]")
            zf.writestr(f"SegmentationClass/{name}.png", _png(value_color[m]))
            zf.writestr(f"SegmentationObject/{name}.png", _png(_instances(m, ignore)))
            if images is not None and image_id in images:
                img = np.asarray(images[image_id])
                if img.dtype != np.uint8 or img.ndim != 3 or img.shape[:2] != m.shape:
                    raise ValueError(f"images[{image_id!r}]: expected uint8 [{m.shape[0]}, {m.shape[1]}, 3], "
                                     f"got {img.dtype} {img.shape}")
                zf.writestr(f"JPEGImages/{name}.png", _png(img))
    return path


def parse_labelmap(text: str) -> dict[str, tuple[int, int, int]]:
    """labelmap.txt -> {label: (r, g, b)}; bad lines raise ValueError naming the line.

    A label without a colour (`car:::`) gets the VOC colour of its position in the file, as datumaro
    (CVAT's dataset library) does, so a colourless labelmap reads the VOC palette masks it describes.
    """
    out: dict[str, tuple[int, int, int]] = {}
    voc = voc_palette(256)
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":")
        try:
            if len(parts) < 2 or not parts[1].strip():
                rgb = tuple(int(x) for x in voc[len(out)])
            else:
                rgb = tuple(int(x) for x in parts[1].split(","))
            if len(rgb) != 3 or not all(0 <= x <= 255 for x in rgb):
                raise ValueError
        except (IndexError, ValueError):
            raise ValueError(f"path: labelmap.txt line {n}: expected 'label:r,g,b:parts:actions', got {line!r}") from None
        out[parts[0]] = rgb  # type: ignore[assignment]
    seen: dict[tuple[int, int, int], str] = {}
    for label, rgb in out.items():
        if rgb in seen:
            raise ValueError(f"path: labelmap.txt: expected one colour per label, got {rgb} for both "
                             f"{seen[rgb]!r} and {label!r}")
        seen[rgb] = label
    return out


def import_cvat(path: str | Path, classes: Classes, *, ids: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """Read a CVAT Segmentation Mask 1.1 zip (or an extracted folder).

    classes: the project's classes; CVAT labels map to them by name ('background' -> the class
        named background, else ignore_index). Project labels that are not classes are ignored (with a
        warning) when no pixel uses them; a labelmap without colours means VOC colours in label order.
    ids: image ids to map names back to (a name is the id without extension); None: the
        names themselves are the keys.
    Returns {id: uint8 [H, W]} read from SegmentationClass/.
    """
    path = Path(path)
    if path.is_dir():
        files = {p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()}
    elif zipfile.is_zipfile(path):
        with zipfile.ZipFile(path) as zf:
            files = {n: zf.read(n) for n in zf.namelist() if not n.endswith("/")}
    else:
        raise ValueError(f"path: expected a CVAT Segmentation Mask 1.1 zip or folder, got {str(path)!r}")
    # some exports wrap everything in one top-level folder
    if "labelmap.txt" not in files:
        roots = {n.split("/", 1)[0] for n in files if "/" in n}
        for r in roots:
            if f"{r}/labelmap.txt" in files:
                files = {n[len(r) + 1:]: b for n, b in files.items() if n.startswith(r + "/")}
                break
    if "labelmap.txt" not in files:
        raise ValueError(f"path: expected labelmap.txt in {str(path)!r}, got files {sorted(files)[:5]}")
    labelmap = parse_labelmap(files["labelmap.txt"].decode("utf-8"))
    label_ids = _label_ids(classes)
    unknown = [n for n in labelmap if n not in label_ids]
    colors = {c: label_ids[n] for n, c in labelmap.items() if n in label_ids}
    # a project label that is not a class is fine as long as no pixel uses it: each gets a value that
    # is neither a class nor ignore, found after decoding
    free = [v for v in range(255, -1, -1) if v not in set(label_ids.values())]
    if len(unknown) > len(free):
        raise ValueError(f"path: expected CVAT labels among {list(classes.names)} (+ background), got "
                         f"{len(unknown)} others")
    marker = dict(zip(unknown, free))
    colors.update({labelmap[n]: v for n, v in marker.items()})
    prefix = "SegmentationClass/"
    masks = {n[len(prefix):-4]: b for n, b in files.items() if n.startswith(prefix) and n.lower().endswith(".png")}
    listed = files.get("ImageSets/Segmentation/default.txt")
    if listed is not None:
        names = [s.strip() for s in listed.decode("utf-8").splitlines() if s.strip()]
        missing = [n for n in names if n not in masks]
        if missing:
            raise ValueError(f"path: expected SegmentationClass/<name>.png for every listed image, missing {missing[:5]}")
    else:
        names = sorted(masks)
    by_name = {n: n for n in names}
    if ids is not None:
        ids = list(ids)
        lookup = {_name(i): i for i in ids}
        extra = [n for n in names if n not in lookup]
        if extra:
            raise ValueError(f"ids: expected an image id for every CVAT image, got none for {extra[:5]}")
        by_name = {n: lookup[n] for n in names}
    out = {}
    for n in names:
        with Image.open(io.BytesIO(masks[n])) as im:
            rgb = np.asarray(im.convert("RGB"))
        mask = rgb_to_index(rgb, colors, name=f"SegmentationClass/{n}.png")
        used = [label for label, v in marker.items() if (mask == v).any()]
        if used:
            raise ValueError(f"path: expected CVAT labels among {list(classes.names)} (+ background) in "
                             f"SegmentationClass/{n}.png, got pixels labelled {used}")
        out[by_name[n]] = mask
    if unknown:
        log.warning("CVAT import: project label(s) %s are not classes; no pixel uses them, ignored", unknown)
    return out
