"""A pool of real, unlabeled photos from installable packages (no downloads at run time).

Sources (each optional; the pool takes what is installed):
- Debian `opencv-doc`: `/usr/share/doc/opencv-doc/examples/data/*.jpg|*.png` (about 70 photos and
  pictures: people, sports, streets, objects, text, calibration boards) and frames of its videos
  `vtest.avi` (pedestrians, 768x576) and `Megamind.avi` (an animated character).
- `scikit-image`'s bundled `skimage/data/` photos (astronaut, coffee, chelsea, rocket, ...).

Video frames are cut into crops and rescaled copies of several sizes, so the pool has many image
sizes (as a real folder would); a few files are copied byte for byte (exact duplicates).
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
from PIL import Image

log = logging.getLogger(__name__)

OPENCV_DATA = Path("/usr/share/doc/opencv-doc/examples/data")
# skimage/data files that are photographs (the rest are masks, tiny test files or arrays)
SKIMAGE_PHOTOS = ("astronaut.png", "coffee.png", "chelsea.png", "rocket.jpg", "camera.png",
                  "motorcycle_left.png", "coins.png", "hubble_deep_field.jpg", "retina.jpg",
                  "brick.png", "grass.png", "gravel.png", "page.png", "text.png", "moon.png",
                  "color.png", "logo.png")
DUPLICATES = ("messi5.jpg", "basketball1.png", "astronaut.png", "vtest_f0100.png")


def _skimage_data_dir() -> Path | None:
    """skimage's bundled data folder, or None when scikit-image is not installed."""
    try:
        import skimage
    except ImportError:
        return None
    return Path(skimage.__file__).parent / "data"


def _video_frames(path: Path, indices: list[int]) -> dict[int, np.ndarray]:
    """Frames at `indices` of a video as uint8 [H, W, 3] (imageio + imageio-ffmpeg)."""
    import imageio.v2 as imageio

    want, out = set(indices), {}
    with imageio.get_reader(str(path), "ffmpeg") as reader:
        for i, frame in enumerate(reader):
            if i in want:
                out[i] = np.asarray(frame)[..., :3]
            if len(out) == len(want):
                break
    return out


def _crops(frame: np.ndarray, rng: np.random.Generator, sizes: list[tuple[int, int]]) -> list[np.ndarray]:
    """Random crops of `frame` [H, W, 3], one per (h, w) in sizes (clipped to the frame)."""
    H, W = frame.shape[:2]
    out = []
    for h, w in sizes:
        h, w = min(h, H), min(w, W)
        y, x = int(rng.integers(0, H - h + 1)), int(rng.integers(0, W - w + 1))
        out.append(frame[y:y + h, x:x + w])
    return out


def build_pool(out: str | Path, *, seed: int = 0) -> list[str]:
    """Write the pool into `out` (a folder; existing files are kept) and return its image ids.

    Returns the relative paths of the images written, sorted. Raises FileNotFoundError when
    no source is installed (neither Debian `opencv-doc` nor scikit-image).
    """
    out = Path(out)
    rng = np.random.default_rng(seed)
    written: list[Path] = []

    if OPENCV_DATA.is_dir():
        d = out / "opencv"
        d.mkdir(parents=True, exist_ok=True)
        for src in sorted(OPENCV_DATA.iterdir()):
            if src.suffix.lower() in (".jpg", ".png") and src.name != "digits.png":  # digits: a 1000x2000 glyph sheet
                shutil.copyfile(src, d / src.name)
                written.append(d / src.name)
        # pedestrians: whole frames, crops of many sizes and rescaled frames
        vdir = out / "vtest"
        vdir.mkdir(exist_ok=True)
        frames = _video_frames(OPENCV_DATA / "vtest.avi", list(range(0, 795, 50)))
        sizes = [(240, 320), (300, 400), (576, 400), (200, 500), (480, 640), (350, 350), (256, 512)]
        for i, f in sorted(frames.items()):
            Image.fromarray(f).save(vdir / f"vtest_f{i:04d}.png")
            written.append(vdir / f"vtest_f{i:04d}.png")
            for j, c in enumerate(_crops(f, rng, [sizes[(i // 50 + j) % len(sizes)] for j in range(2)])):
                p = vdir / f"vtest_f{i:04d}_crop{j}_{c.shape[1]}x{c.shape[0]}.png"
                Image.fromarray(np.ascontiguousarray(c)).save(p)
                written.append(p)
            if i % 100 == 0:  # a smaller copy: people at another scale
                s = 0.4 + 0.1 * (i // 100 % 5)
                small = Image.fromarray(f).resize((int(f.shape[1] * s), int(f.shape[0] * s)), Image.BILINEAR)
                p = vdir / f"vtest_f{i:04d}_x{s:.1f}.png"
                small.save(p)
                written.append(p)
        mdir = out / "megamind"
        mdir.mkdir(exist_ok=True)
        for i, f in sorted(_video_frames(OPENCV_DATA / "Megamind.avi", list(range(0, 270, 30))).items()):
            Image.fromarray(f).save(mdir / f"megamind_f{i:04d}.png")
            written.append(mdir / f"megamind_f{i:04d}.png")
    else:
        log.warning("pool: Debian opencv-doc is not installed (%s missing); its photos are skipped", OPENCV_DATA)

    sk = _skimage_data_dir()
    if sk is not None:
        d = out / "skimage"
        d.mkdir(parents=True, exist_ok=True)
        for name in SKIMAGE_PHOTOS:
            if (sk / name).is_file():
                shutil.copyfile(sk / name, d / name)
                written.append(d / name)
    else:
        log.warning("pool: scikit-image is not installed; its photos are skipped")

    if not written:
        raise FileNotFoundError("pool: expected Debian opencv-doc or scikit-image installed, got neither")
    # exact duplicates (same bytes, another name), as real folders have
    by_name = {p.name: p for p in written}
    ddir = out / "duplicates"
    ddir.mkdir(exist_ok=True)
    for name in DUPLICATES:
        if name in by_name:
            copy = ddir / f"copy_of_{name}"
            shutil.copyfile(by_name[name], copy)
            written.append(copy)
    return sorted(str(p.relative_to(out)) for p in written)
