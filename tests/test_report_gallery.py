"""Report pictures and the gallery page: overlays at any size, missing images and maps, offline links."""
from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pandas as pd
from PIL import Image

from blindspots.data.pool import ImagePool
from blindspots.models.adapters import CallableSegmenter
from blindspots.report import write_gallery
from blindspots.report.overlays import overlay, resize_labels, thumbnail, thumbnail_size
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
