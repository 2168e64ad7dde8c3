"""Figure 6 panels as PNG and MP4 videos: produced and readable."""
from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from blindspots.data.classes import Classes
from blindspots.surprise.views import (heatmap_rgb, panels_for, read_video_frames, save_png, surprise_panel,
                                       write_video)

CLASSES = Classes(("a", "b", "c"))


def inputs(n=4, size=32, seed=0):
    rng = np.random.default_rng(seed)
    imgs = rng.integers(0, 256, (n, size, size, 3), dtype=np.uint8)
    preds = rng.integers(0, 3, (n, size, size))
    labels = rng.integers(0, 3, (n, size, size)).astype(np.uint8)
    labels[:, 0] = 255
    sa = rng.random((n, size, size)).astype(np.float32)
    sa[:, :3, :3] = np.nan
    return imgs, preds, labels, sa


def test_panel_layout_and_png_roundtrip(tmp_path):
    imgs, preds, labels, sa = inputs()
    panel = surprise_panel(imgs[0], preds[0], sa[0], CLASSES, label=labels[0], threshold=0.5, titles=False)
    assert panel.shape == (64, 96, 3) and panel.dtype == np.uint8
    assert np.array_equal(panel[:32, :32], imgs[0])                 # input top-left
    assert np.array_equal(panel[:32, 64:96], CLASSES.colorize(preds[0]))
    diff = panel[32:, :32]
    wrong = (labels[0] != preds[0]) & (labels[0] != 255)
    assert (diff[wrong] == [255, 0, 0]).all() and (diff[labels[0] == 255] == 255).all()
    above = panel[32:, 32:64]
    sel = np.isfinite(sa[0]) & (sa[0] > 0.5)
    assert np.array_equal(above[sel], imgs[0][sel])
    assert (panel[32:35, 64:67] == [128, 128, 128]).all()            # NaN SA drawn grey
    no_label = surprise_panel(imgs[0], preds[0], sa[0], CLASSES)
    assert no_label.shape == (64, 64, 3)
    path = save_png(panel, tmp_path / "p.png")
    assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), panel)


def test_video_is_written_and_decodes(tmp_path):
    imgs, preds, labels, sa = inputs(n=5, size=33)  # odd size: padded to even for H.264
    frames = list(panels_for(imgs, preds, sa, CLASSES, labels=labels))
    path = write_video(frames, tmp_path / "v.mp4", fps=4)
    back = read_video_frames(path)
    assert len(back) == 5 and back[0].shape == (66, 100, 3)
    # lossy codec: frames stay close to the originals on average
    assert np.abs(back[2][:66, :99].astype(float) - frames[2]).mean() < 25


def test_bad_inputs(tmp_path):
    imgs, preds, labels, sa = inputs()
    with pytest.raises(ValueError, match="image"):
        surprise_panel(imgs[0].astype(float), preds[0], sa[0], CLASSES)
    with pytest.raises(ValueError, match="sa"):
        surprise_panel(imgs[0], preds[0], sa[0][:5], CLASSES)
    with pytest.raises(ValueError, match="frames"):
        write_video([], tmp_path / "x.mp4")
    with pytest.raises(ValueError, match="sa"):
        heatmap_rgb(np.zeros(3))
