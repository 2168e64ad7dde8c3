"""Simple image attributes for segmentation failure scenarios: what a person can name.

Per image: brightness, contrast, saturation, sharpness, colour balance (red-blue, green-magenta),
the hue of the whole image and of its top third (with the top third's CIELAB a*, b*) and size; per
predicted map: object count and sizes, and the colour cast measured region by region against the
pool's usual colour of each predicted class (`region_cast`); per scan row: the target's predicted
class mix (`frac__T__k`). One row per image id, one float column per attribute, so that scenarios can be
described by the attributes that set them apart (`segmentation.find_scenarios`).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import pandas as pd
from PIL import Image
from scipy import ndimage
from tqdm.auto import tqdm

from blindspots.data.sources import load_or_reason
from blindspots.scan import find_map, read_score_table, schema
from blindspots.scan.manifest import load_manifest, scan_pool_source
from blindspots.scenarios.region_cast import RegionCast

log = logging.getLogger(__name__)

IMAGE_ATTRIBUTES = ("brightness", "contrast", "saturation", "sharpness", "red_blue", "green_magenta", "hue_cos",
                    "hue_sin", "top_hue_cos", "top_hue_sin", "top_lab_a", "top_lab_b", "log_pixels")
MAP_ATTRIBUTES = ("objects", "object_size", "largest_region")
MIN_OBJECT_PIXELS = 4  # connected regions smaller than this are speckle, not objects


def _lab_ab(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float [..., 3] sRGB in [0, 1] -> CIELAB (a*, b*) under D65, each float [...]."""
    lin = np.where(x <= 0.04045, x / 12.92, ((x + 0.055) / 1.055) ** 2.4)
    xyz = lin @ np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]).T
    xyz = xyz / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])


def image_attributes(image: np.ndarray) -> dict[str, float]:
    """uint8 [H, W, 3] -> IMAGE_ATTRIBUTES: brightness / contrast = mean / std of luma in [0, 1],
    saturation = mean HSV saturation, sharpness = mean |Laplacian| of luma, red_blue and
    green_magenta = mean colour-balance differences in [-1, 1], hue_cos / hue_sin = the direction of the
    mean chroma (YIQ I, Q: a hue rotation of the whole image turns it), top_hue_cos / top_hue_sin and
    top_lab_a / top_lab_b = the same direction and the mean CIELAB a*, b* of the top third of rows,
    log_pixels = log(H * W).

    Why the top third: the whole image's mean chroma mixes regions of different hue (sky, plants,
    road) that partly cancel, so its direction depends on the content as much as on a colour cast.
    The top of an outdoor or street photo is mostly sky, one uniform region, so its hue follows a
    cast or a hue rotation closely (on the procedural scenes it separates rotations by their
    direction, which the whole-image hue does not; benchmarks/scenarios.py)."""
    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"image: expected uint8 [H, W, 3], got shape {img.shape}")
    x = img.astype(np.float32) / 255.0
    r, g, b = x[..., 0], x[..., 1], x[..., 2]
    luma = 0.299 * r + 0.587 * g + 0.114 * b
    mx, mn = x.max(axis=2), x.min(axis=2)
    sat = np.where(mx > 1e-6, (mx - mn) / np.maximum(mx, 1e-6), 0.0)
    lap = np.zeros_like(luma)
    if min(luma.shape) >= 3:
        lap[1:-1, 1:-1] = (4 * luma[1:-1, 1:-1] - luma[:-2, 1:-1] - luma[2:, 1:-1] - luma[1:-1, :-2] - luma[1:-1, 2:])
    i_mean = float((0.596 * r - 0.274 * g - 0.322 * b).mean())
    q_mean = float((0.211 * r - 0.523 * g + 0.312 * b).mean())
    angle = np.arctan2(q_mean, i_mean)
    top = slice(0, max(1, x.shape[0] // 3))
    i_top = float((0.596 * r[top] - 0.274 * g[top] - 0.322 * b[top]).mean())
    q_top = float((0.211 * r[top] - 0.523 * g[top] + 0.312 * b[top]).mean())
    top_angle = np.arctan2(q_top, i_top)
    lab_a, lab_b = _lab_ab(x[top])
    return {"brightness": float(luma.mean()), "contrast": float(luma.std()), "saturation": float(sat.mean()),
            "sharpness": float(np.abs(lap).mean()), "red_blue": float((r - b).mean()),
            "green_magenta": float((g - (r + b) / 2).mean()), "hue_cos": float(np.cos(angle)),
            "hue_sin": float(np.sin(angle)), "top_hue_cos": float(np.cos(top_angle)),
            "top_hue_sin": float(np.sin(top_angle)), "top_lab_a": float(lab_a.mean()), "top_lab_b": float(lab_b.mean()),
            "log_pixels": float(np.log(luma.size))}


def map_attributes(labels: np.ndarray, background: Sequence[int] = ()) -> dict[str, float]:
    """int [H, W] class map -> MAP_ATTRIBUTES: objects = connected regions (>= MIN_OBJECT_PIXELS) of
    the classes not in `background`, object_size = their median area as a share of the image,
    largest_region = the largest region's share (any class)."""
    lab = np.asarray(labels)
    if lab.ndim != 2:
        raise ValueError(f"labels: expected a class map [H, W], got shape {lab.shape}")
    areas, largest = [], 0
    for k in np.unique(lab):
        comp, n = ndimage.label(lab == k)
        if n == 0:
            continue
        sizes = np.bincount(comp.ravel())[1:]
        largest = max(largest, int(sizes.max()))
        if int(k) not in set(background):
            areas.extend(int(s) for s in sizes if s >= MIN_OBJECT_PIXELS)
    total = float(lab.size)
    return {"objects": float(len(areas)), "object_size": float(np.median(areas) / total) if areas else 0.0,
            "largest_region": largest / total}


def scan_attributes(scan_dir: str | Path, *, ids: Iterable[str] | None = None, pool_root: str | Path | None = None,
                    background: Sequence[int] = (), progress: bool = False,
                    manifest: dict | None = None, cast_models: Sequence[str] | None = None) -> pd.DataFrame:
    """The attribute table of a scan's ok images: index id, columns IMAGE_ATTRIBUTES, MAP_ATTRIBUTES
    and REGION_ATTRIBUTES (`cast_cos`, `cast_sin`: the colour cast relative to the scanned pool's usual
    colour of each class, regions taken from the saved maps of `cast_models`; NaN without maps) and
    `class_<name>` (the target's class mix).

    Reads the scan through `blindspots.scan` (score table, manifest, saved maps) and decodes each
    image once. ids: a subset (default: every ok row). background: class ids not counted as
    objects (e.g. sky, road). Images that no longer decode get NaN image attributes. manifest: the
    scan's scan.json when the caller has read it already (read here otherwise). cast_models: whose
    maps delimit the regions of the colour cast (default: the scan's competitors, or the target
    without any). Why not the target's: on its failures its map is wrong by definition (a sky it
    calls vegetation hides the cast); on the procedural scenes the cast from the target's maps got
    the direction of a hue rotation of its failures right 58% of the time, from a competitor's 98%.
    """
    manifest = load_manifest(scan_dir) if manifest is None else manifest
    if manifest is None:
        raise ValueError(f"scan_dir: expected a scan folder with scan.json, got {str(scan_dir)!r}")
    table = read_score_table(scan_dir, manifest=manifest)
    target = manifest["target"]
    ok = table[schema.STATUS] == schema.STATUS_OK
    table = table[ok.to_numpy(bool)].set_index(schema.ID)
    if ids is not None:
        wanted = [str(i) for i in ids]
        missing = [i for i in wanted if i not in table.index]
        if missing:
            raise ValueError(f"ids: expected ok images of the scan, got {len(missing)} others (first {missing[0]!r})")
        table = table.loc[wanted]
    root = scan_pool_source(manifest, pool_root)  # a folder, or the scan's object-store / shard source
    names = manifest.get("models", {}).get(target, {}).get("classes") or manifest.get("classes", {}).get("names", [])
    rows = []
    if cast_models is None:
        cast_models = [m for m in manifest.get("competitors", []) if m != target] or [target]
    cast = RegionCast(len(table), max(len(names), int(manifest.get("num_classes") or 0), 1), list(cast_models))
    for n, image_id in enumerate(tqdm(table.index, desc="attributes", disable=not progress)):
        row: dict[str, float] = {}
        image, why = load_or_reason(root, image_id)
        if image is not None:
            row.update(image_attributes(image))
        else:
            log.warning("attributes: %s not readable (%s)", image_id, why)
            row.update({a: np.nan for a in IMAGE_ATTRIBUTES})
        path = find_map(scan_dir, target, image_id)
        if path is not None:
            with Image.open(path) as im:
                labels = np.asarray(im)
            row.update(map_attributes(labels, background))
        else:
            row.update({a: np.nan for a in MAP_ATTRIBUTES})
        if image is not None:
            for model in cast.models:
                cast_path = path if model == target else find_map(scan_dir, model, image_id)
                if cast_path is not None:
                    with Image.open(cast_path) as im:
                        cast.add(n, model, image, np.asarray(im))
        rows.append(row)
    out = pd.DataFrame(rows, index=pd.Index(table.index, name="id"))
    for name, values in cast.attributes().items():
        out[name] = values
    for k in schema.frac_models(table.columns).get(target, []):
        name = names[k] if k < len(names) else f"{k}"
        out[f"class_{name}"] = table[schema.frac(target, k)].to_numpy(np.float64, na_value=np.nan)
    return out
