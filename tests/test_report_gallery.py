"""Report pictures and the gallery page: overlays at any size, missing images and maps, offline links."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.data import ImagePool
from blindspots.models.adapters import CallableSegmenter
from blindspots.report import write_gallery
from blindspots.report.drawing.overlays import overlay, resize_labels, thumbnail, thumbnail_size
from blindspots.scan import scan_pool
from blindspots.scan.layout import ScanLayout


def test_overlay_scales_the_map_and_blends():
    image = np.full((10, 20, 3), 100, np.uint8)
    labels = np.array([[0, 1], [1, 0]])  # 2 x 2 map over a 10 x 20 image
    palette = np.array([[0, 0, 0], [255, 0, 0]], np.uint8)
    out = overlay(image, labels, palette, alpha=0.5)
    assert out.shape == (10, 20, 3)
    assert tuple(out[0, 0]) == (50, 50, 50) and tuple(out[0, 19]) == (178, 50, 50)
    assert resize_labels(labels, (4, 4)).tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]
    assert thumbnail_size(1110, 1282, 320) == (277, 320) and thumbnail_size(20, 30, 320) == (20, 30)
    assert thumbnail(np.zeros((1110, 1282, 3), np.uint8), 320).shape == (277, 320, 3)


def test_gallery_shows_what_exists(tmp_path):
    root = tmp_path / "pool"
    root.mkdir()
    rng = np.random.default_rng(0)
    for name, (h, w) in {"a.jpg": (40, 60), "b.png": (300, 200)}.items():
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / name)
    seg = CallableSegmenter(lambda b: b[..., 0].astype(np.int64) * 2 // 256, 2, output="labels")
    scan = scan_pool(ImagePool(root), {"t": seg}, tmp_path / "scan", target="t", progress=False)
    ScanLayout(scan).map_path("t", "b.png").unlink()  # a map that is gone
    (root / "a.jpg").unlink()  # an image that moved away
    picks = pd.DataFrame({"id": ["a.jpg", "b.png"], "score": [0.5, 0.25], "reason": ["x <y>", "z"]})
    index = write_gallery(picks, scan, tmp_path / "g")
    html = index.read_text()
    assert "x &lt;y&gt;" in html and "image not readable" in html and "no saved map" in html
    for src in re.findall(r'src="([^"]+)"', html):
        assert (tmp_path / "g" / unquote(src)).is_file()
    assert Image.open(tmp_path / "g" / "thumbs" / "t" / "a.jpg").size == (60, 40)  # the map alone
    assert Image.open(tmp_path / "g" / "thumbs" / "_image" / "b.jpg").size == (200, 300)  # never enlarged
    assert "http" not in html
    assert isinstance(index, Path)


def test_binary_overlay_leaves_the_background_clear_and_every_picture_enlarges(tmp_path):
    root = tmp_path / "pool"
    root.mkdir()
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 256, (600, 900, 3), dtype=np.uint8)).save(root / "a.png")
    seg = CallableSegmenter(lambda b: (b[..., 0] > 200).astype(np.int64), 2, output="labels")
    scan = scan_pool(ImagePool(root), {"t": seg}, tmp_path / "scan", target="t", progress=False)
    picks = pd.DataFrame({"id": ["a.png"], "score": [0.1], "reason": ["r"]})
    html = write_gallery(picks, scan, tmp_path / "g", score_label=None, intro="in the order drawn").read_text()
    assert "score" not in html.split("<body>")[1] and "in the order drawn" in html
    links = [unquote(h) for h in re.findall(r'<a href="([^"]+)"', html)]
    assert links == ["full/_image/a.jpg", "full/t/a.jpg"]
    assert Image.open(tmp_path / "g" / links[0]).size == (900, 600)  # full size (under FULL_SIDE)
    photo = np.asarray(Image.open(tmp_path / "g" / links[0])).astype(int)
    drawn = np.asarray(Image.open(tmp_path / "g" / links[1])).astype(int)
    background = np.asarray(Image.open(root / "a.png"))[..., 0] <= 200
    # class 0 of a binary model is not painted: the photo shows through (up to JPEG noise) ...
    assert np.abs(drawn[background] - photo[background]).mean() < 15  # painted at 50%: about 64
    # ... class 1 is
    assert np.abs(drawn[~background] - photo[~background]).mean() > 30
    image = np.full((4, 4, 3), 100, np.uint8)
    out = overlay(image, np.array([[0, 1], [1, 0]]), np.array([[0, 0, 0], [255, 0, 0]], np.uint8), clear=(0,))
    assert tuple(out[0, 0]) == (100, 100, 100) and tuple(out[0, 3]) == (178, 50, 50)
