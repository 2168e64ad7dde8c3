"""Per-pixel maps for FiftyOne's `fo.Heatmap`: where the target and its competitors disagree, and
how surprising each pixel is to the model.

A scan keeps each model's argmax map, not the disagreement itself, so the export draws it: for
each image, the number of competitors whose class differs from the target's at each pixel
(uint8 [H, W], 0..G). Its pixel mean divided by G is the mean over competitors of the scan's
`dpa__T__G` (1 - pixel agreement), so the map and the score table tell the same story.
Maps are written once and kept while newer than the argmax maps they come from (re-exports
redraw only what changed).

Surprise: `blindspots surprise view --maps DIR` saves each image's per-pixel SA (float32 .npy).
FiftyOne keeps heatmaps on disk as 8-bit images read against `range` (its own `Heatmap.export_map`
writes float maps that way), so the export scales SA linearly from [low, high] (the 1st and 99th
percentiles over all the maps, the scale of `surprise view`'s panels) to 0..255, clipped, with
NaN (a class without a model) at 0; the dataset's info keeps [low, high] in SA units.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from blindspots.atomic import write_atomic
from blindspots.ids import artifact_path, find_artifact
from blindspots.scan.layout import ScanLayout
from blindspots.scan.png import encode_index_png


def disagreement_map(target_map: np.ndarray, competitor_maps: Sequence[np.ndarray]) -> np.ndarray:
    """target_map: int [H, W]; competitor_maps: G maps int [H, W] -> uint8 [H, W], the number of
    competitors that predict another class than the target at each pixel (0..G)."""
    count = np.zeros(np.shape(target_map), dtype=np.uint8)
    for m in competitor_maps:
        if np.shape(m) != np.shape(target_map):
            raise ValueError(f"competitor_maps: expected maps of the target's shape {np.shape(target_map)}, "
                             f"got {np.shape(m)}")
        count += np.asarray(m) != np.asarray(target_map)
    return count


def write_disagreement_maps(scan_dir: str | Path, target: str, competitors: Sequence[str], ids: Sequence[str],
                            out_dir: str | Path, *, progress: bool = True) -> list[Path | None]:
    """Draw the disagreement map of every id (`disagreement_map`) as `out_dir/<artifact name>` (8-bit PNG).

    Returns one path per id, None where the target or a competitor has no saved map (the image
    failed, or the scan ran without maps). An existing file newer than its argmax maps is kept.
    """
    layout = ScanLayout(scan_dir)
    out: list[Path | None] = []
    for image_id in tqdm(ids, desc=f"disagreement maps ({target})", unit="img", disable=not progress):
        sources = [layout.find_map(m, image_id) for m in (target, *competitors)]
        if any(s is None for s in sources):
            out.append(None)
            continue
        dest = artifact_path(out_dir, image_id)
        if not dest.is_file() or dest.stat().st_mtime < max(os.stat(s).st_mtime for s in sources):  # type: ignore[arg-type]
            maps = [_read(s) for s in sources]  # type: ignore[arg-type]
            png = encode_index_png(disagreement_map(maps[0], maps[1:]))
            write_atomic(dest, lambda t: t.write_bytes(png))  # a reader (FiftyOne's App) never sees half a file
        out.append(dest)
    return out


def surprise_scale(maps: Sequence[np.ndarray]) -> tuple[float, float]:
    """(low, high): the 1st and 99th percentiles of the finite values of all maps (0, 1 without any)."""
    vals = np.concatenate([np.ravel(m) for m in maps]) if maps else np.zeros(0, np.float32)
    vals = vals[np.isfinite(vals)]
    if not vals.size:
        return 0.0, 1.0
    low, high = float(np.percentile(vals, 1)), float(np.percentile(vals, 99))
    return low, (high if high > low else low + 1.0)


def surprise_to_uint8(sa: np.ndarray, low: float, high: float) -> np.ndarray:
    """sa: float [H, W] -> uint8 [H, W]: round(255 (sa - low) / (high - low)), clipped to 0..255; NaN -> 0."""
    scaled = np.clip(np.rint((np.nan_to_num(sa, nan=low) - low) * (255.0 / (high - low))), 0, 255)
    return scaled.astype(np.uint8)


def write_surprise_maps(ids: Sequence[str], maps_dir: str | Path, out_dir: str | Path, *,
                        progress: bool = True) -> tuple[list[Path | None], tuple[float, float]]:
    """Convert `maps_dir/<id>.npy` SA maps (`surprise view --maps`) to 8-bit PNGs in `out_dir`.

    Returns one path per id (None where the id has no map) and the (low, high) SA scale."""
    found = [find_artifact(maps_dir, i, ".npy") for i in ids]
    if not any(found):
        raise ValueError(f"surprise_maps: expected <id>.npy maps of this pool's images in {str(maps_dir)!r} "
                         "(written by the `surprise view --maps` command), got none")
    arrays = {k: np.load(p) for k, p in enumerate(found) if p is not None}
    low, high = surprise_scale(list(arrays.values()))
    out: list[Path | None] = [None] * len(ids)
    for k in tqdm(sorted(arrays), desc="surprise maps", unit="img", disable=not progress):
        dest = artifact_path(out_dir, ids[k])
        png = encode_index_png(surprise_to_uint8(arrays[k], low, high))
        write_atomic(dest, lambda t: t.write_bytes(png))
        out[k] = dest
    return out, (low, high)


def _read(path: Path) -> np.ndarray:
    with Image.open(path) as im:
        return np.asarray(im)
