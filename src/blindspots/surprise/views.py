"""Views (paper Section 5.2, Figure 6): side-by-side panels per image and an MP4 of a frame sequence.

Panel layout (Figure 6): top row input, label, prediction; bottom row the label/prediction difference,
the pixels whose SA is above a threshold, and the SA heatmap. Without a label the top row shows the
input and the prediction, the bottom row the thresholded pixels and the heatmap.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
from matplotlib import colormaps
from PIL import Image, ImageDraw

from blindspots.data.classes import Classes
from blindspots.data.segsets import SegmentationSet
from blindspots.data.sources import ImagePool
from blindspots.ids import artifact_path
from blindspots.surprise.estimators import load_estimator
from blindspots.surprise.image import surprise_heatmaps
from blindspots.surprise.pool import fitted_extractor
from blindspots.extras import require

NAN_COLOUR = np.array([128, 128, 128], dtype=np.uint8)  # pixels with no SA (class not modelled)


def heatmap_rgb(sa: np.ndarray, *, vmin: float | None = None, vmax: float | None = None,
                cmap: str = "inferno") -> np.ndarray:
    """SA map float [H, W] -> uint8 RGB [H, W, 3] (NaN grey). vmin/vmax default to the 1st/99th percentile."""
    sa = np.asarray(sa, dtype=np.float64)
    if sa.ndim != 2:
        raise ValueError(f"sa: expected a 2-D map [H, W], got shape {sa.shape}")
    finite = np.isfinite(sa)
    vals = sa[finite]
    lo = vmin if vmin is not None else (float(np.percentile(vals, 1)) if vals.size else 0.0)
    hi = vmax if vmax is not None else (float(np.percentile(vals, 99)) if vals.size else 1.0)
    norm = np.clip((np.where(finite, sa, lo) - lo) / max(hi - lo, 1e-12), 0, 1)
    rgb = (colormaps[cmap](norm)[..., :3] * 255).round().astype(np.uint8)
    rgb[~finite] = NAN_COLOUR
    return rgb


def _label_text(img: np.ndarray, text: str) -> np.ndarray:
    pil = Image.fromarray(img)
    draw = ImageDraw.Draw(pil)
    draw.rectangle([0, 0, 7 * len(text) + 4, 12], fill=(0, 0, 0))
    draw.text((2, 0), text, fill=(255, 255, 255))
    return np.asarray(pil)


def surprise_panel(image: np.ndarray, pred: np.ndarray, sa: np.ndarray, classes: Classes, *,
                   label: np.ndarray | None = None, threshold: float | None = None,
                   vmin: float | None = None, vmax: float | None = None, titles: bool = True) -> np.ndarray:
    """Figure 6 panel, uint8 RGB [2H, 3W, 3] (with label) or [2H, 2W, 3] (without).

    image: uint8 [H, W, 3]; pred: int [H, W]; sa: float [H, W] (NaN = not scored);
    label: int [H, W] with classes.ignore_index, optional.
    threshold: SA above which pixels are shown (default: the 90th percentile of the map).
    Difference: red = wrong, white = ignored, black = right.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"image: expected uint8 [H, W, 3], got {image.dtype} {image.shape}")
    h, w = image.shape[:2]
    for name, arr in (("pred", pred), ("sa", sa), ("label", label)):
        if arr is not None and np.shape(arr) != (h, w):
            raise ValueError(f"{name}: expected shape {(h, w)} like the image, got {np.shape(arr)}")
    sa = np.asarray(sa, dtype=np.float64)
    finite = np.isfinite(sa)
    thr = threshold if threshold is not None else (float(np.percentile(sa[finite], 90)) if finite.any() else np.inf)
    above = np.where((finite & (sa > thr))[..., None], image, (image * 0.15).astype(np.uint8))
    heat = heatmap_rgb(sa, vmin=vmin, vmax=vmax)
    pred_rgb = classes.colorize(pred)
    tiles = [("input", image)]
    if label is not None:
        label = np.asarray(label)
        diff = np.zeros((h, w, 3), dtype=np.uint8)
        ignored = label == classes.ignore_index if classes.ignore_index is not None else np.zeros((h, w), bool)
        diff[(label != pred) & ~ignored] = (255, 0, 0)
        diff[ignored] = (255, 255, 255)
        tiles += [("label", classes.colorize(label)), ("prediction", pred_rgb),
                  ("difference", diff), (f"SA > {thr:.3g}", above), ("SA heatmap", heat)]
        cols = 3
    else:
        tiles += [("prediction", pred_rgb), (f"SA > {thr:.3g}", above), ("SA heatmap", heat)]
        cols = 2
    if titles:
        tiles = [(t, _label_text(np.ascontiguousarray(a), t)) for t, a in tiles]
    rows = [np.concatenate([a for _, a in tiles[r * cols:(r + 1) * cols]], axis=1) for r in range(2)]
    return np.concatenate(rows, axis=0)


def save_png(frame: np.ndarray, path: str | Path) -> Path:
    """Write uint8 RGB [H, W, 3] to a PNG file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(frame, dtype=np.uint8)).save(path)
    return path


def pad_frames(frames: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Frames uint8 [H_i, W_i, 3] of any sizes, each centred on a black canvas [max H_i, max W_i, 3] (a
    video has one frame size; panels of images of different sizes have different sizes)."""
    frames = [np.asarray(f, dtype=np.uint8) for f in frames]
    if not frames:
        return frames
    h = max(f.shape[0] for f in frames)
    w = max(f.shape[1] for f in frames)
    out = []
    for f in frames:
        if f.shape[:2] == (h, w):
            out.append(f)
            continue
        top, left = (h - f.shape[0]) // 2, (w - f.shape[1]) // 2
        canvas = np.zeros((h, w) + f.shape[2:], dtype=np.uint8)
        canvas[top:top + f.shape[0], left:left + f.shape[1]] = f
        out.append(canvas)
    return out


def write_video(frames: Iterable[np.ndarray], path: str | Path, *, fps: float = 5.0) -> Path:
    """Encode uint8 RGB frames [H, W, 3] (one size) to an MP4 (H.264) with imageio's bundled ffmpeg.

    Frames are padded at the bottom/right to even sizes (yuv420p needs them) with black.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fps <= 0:
        raise ValueError(f"fps: expected a positive frame rate, got {fps}")
    imageio = require("imageio.v2", "an MP4 of surprise panels")
    writer = None
    shape = None
    count = 0
    try:
        for frame in frames:
            frame = np.asarray(frame, dtype=np.uint8)
            if shape is None:
                shape = frame.shape
                writer = imageio.get_writer(str(path), fps=fps, codec="libx264", macro_block_size=1,
                                            pixelformat="yuv420p", ffmpeg_log_level="error")
            if frame.shape != shape:
                raise ValueError(f"frames: expected every frame of shape {shape}, got {frame.shape}")
            pad_h, pad_w = frame.shape[0] % 2, frame.shape[1] % 2
            if pad_h or pad_w:
                frame = np.pad(frame, ((0, pad_h), (0, pad_w), (0, 0)))
            writer.append_data(frame)
            count += 1
    finally:
        if writer is not None:
            writer.close()
    if count == 0:
        raise ValueError("frames: expected at least one frame, got none")
    return path


def panels_for(images: np.ndarray, preds: np.ndarray, sa_maps: np.ndarray, classes: Classes, *,
               labels: np.ndarray | None = None, threshold: float | None = None) -> Iterable[np.ndarray]:
    """Yield a panel per image with one colour scale for the whole sequence (1st/99th percentile).
    images, preds, sa_maps (and labels): arrays [N, H, W, ...] or sequences of per-image arrays of any size."""
    vals = np.concatenate([np.ravel(m) for m in sa_maps]) if len(sa_maps) else np.zeros(0, np.float32)
    vals = vals[np.isfinite(vals)]
    vmin, vmax = (float(np.percentile(vals, 1)), float(np.percentile(vals, 99))) if vals.size else (0.0, 1.0)
    thr = threshold if threshold is not None else (float(np.percentile(vals, 90)) if vals.size else None)
    for i in range(len(images)):
        yield surprise_panel(images[i], preds[i], sa_maps[i], classes,
                             label=None if labels is None else labels[i], threshold=thr, vmin=vmin, vmax=vmax)


def read_video_frames(path: str | Path) -> list[np.ndarray]:
    """Decode an MP4 back to uint8 RGB frames (for checks)."""
    reader = require("imageio.v2", "reading an MP4").get_reader(str(path))
    try:
        return [np.asarray(f) for f in reader]
    finally:
        reader.close()


__all__: Sequence[str] = ("heatmap_rgb", "surprise_panel", "save_png", "write_video", "panels_for",
                          "read_video_frames")


def write_panels(images: str | Path, estimator: str | Path, out: str | Path, *, masks: str | Path | None = None,
                 video: str | Path | None = None, maps: str | Path | None = None, model: str | None = None,
                 features: str | None = None, threshold: float | None = None, limit: int = 200, fps: float = 5.0,
                 batch_size: int = 16, progress: bool = True) -> tuple[int, list[str]]:
    """Figure 6 panels (input, [label,] prediction, [difference,] SA above threshold, SA heatmap) of the
    first `limit` images of a folder (in id order), one PNG each in `out`; masks: a folder of label masks
    (adds the label and difference tiles); video: also an MP4 of the panels; maps: also each image's
    per-pixel SA as `<id>.npy` (float32 [H, W], NaN where the predicted class has no model); threshold:
    the SA of the "above" tile (default: the 90th percentile). Returns (panels written, unreadable images
    skipped as 'id (why)'); ValueError when no image is readable."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit (--limit): expected at least 1 image, got {limit!r}")
    if threshold is not None and not math.isfinite(threshold):
        raise ValueError(f"threshold (--threshold): expected a finite SA value, got {threshold}")
    est = load_estimator(estimator)
    ex = fitted_extractor(estimator, model, batch_size, features)
    classes = getattr(ex.model, "classes", None) or Classes(tuple(f"class{k}" for k in range(ex.num_classes)))
    bad: list[str] = []
    if masks is not None:  # lists: images of different sizes are run one size at a time
        data = SegmentationSet(images, masks)
        ids = data.ids[:limit]
        pairs = [data.load(i) for i in ids]
        imgs, labels = [p[0] for p in pairs], [p[1] for p in pairs]
    else:
        pool = ImagePool(images)
        items = list(pool.iter_items(pool.ids[:limit]))  # an unreadable file is skipped, as scoring does
        bad = [f"{it.id} ({it.error})" for it in items if not it.ok]
        ids, imgs, labels = [it.id for it in items if it.ok], [it.image for it in items if it.ok], None
        if not ids:
            raise ValueError(f"images: expected readable images in {str(images)!r}, got none ({len(bad)} unreadable)")
    sa, pred = surprise_heatmaps(ex, est, imgs, progress=progress, ids=list(ids))
    if maps is not None:
        for i, m in zip(ids, sa):
            path = artifact_path(maps, i, ".npy")
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, np.asarray(m, dtype=np.float32))
    frames = list(panels_for(imgs, pred, sa, classes, labels=labels, threshold=threshold))
    for i, frame in zip(ids, frames):
        save_png(frame, Path(out) / Path(i).with_suffix(".png"))
    if video is not None:
        write_video(pad_frames(frames), video, fps=fps)  # panels of different sizes: centred on one canvas
    return len(frames), bad
