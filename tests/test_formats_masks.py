"""Index / VOC-palette / colour-coded PNG masks."""
from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from PIL import Image

from blindspots.data.classes import Classes
from blindspots.data.formats.masks import (
    mask_filename, read_mask, read_masks, write_color_mask, write_mask, write_masks,
)

CLASSES = Classes(("sky", "road", "building", "car"))


def sample_mask(seed: int = 0, size: int = 32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = rng.integers(0, 4, (size, size)).astype(np.uint8)
    m[:3, :5] = 255
    return m


def test_palette_png_round_trip(tmp_path) -> None:
    m = sample_mask()
    p = write_mask(tmp_path / "a.png", m, classes=CLASSES)
    with Image.open(p) as im:
        assert im.mode == "P"
        assert tuple(im.getpalette()[3:6]) == tuple(CLASSES.palette[1])
    np.testing.assert_array_equal(read_mask(p, classes=CLASSES), m)
    np.testing.assert_array_equal(read_mask(p.read_bytes()), m)


def test_grey_and_colour_masks(tmp_path) -> None:
    m = sample_mask(1)
    Image.fromarray(m).save(tmp_path / "grey.png")
    np.testing.assert_array_equal(read_mask(tmp_path / "grey.png"), m)
    write_color_mask(tmp_path / "rgb.png", m, CLASSES)
    with Image.open(tmp_path / "rgb.png") as im:
        assert im.mode == "RGB"
    np.testing.assert_array_equal(read_mask(tmp_path / "rgb.png", classes=CLASSES), m)


def test_errors(tmp_path) -> None:
    write_color_mask(tmp_path / "rgb.png", sample_mask(), CLASSES)
    with pytest.raises(ValueError, match="classes"):
        read_mask(tmp_path / "rgb.png")
    rgb = np.zeros((4, 4, 3), np.uint8)
    rgb[0, 0] = (1, 2, 3)
    Image.fromarray(rgb).save(tmp_path / "odd.png")
    with pytest.raises(ValueError, match=r"colour \(1, 2, 3\)"):
        read_mask(tmp_path / "odd.png", classes=CLASSES)
    Image.fromarray(np.full((4, 4), 9, np.uint8)).save(tmp_path / "nine.png")
    with pytest.raises(ValueError, match="class ids 0..3"):
        read_mask(tmp_path / "nine.png", classes=CLASSES)
    (tmp_path / "bad.png").write_bytes(b"not a png")
    with pytest.raises(ValueError, match="source"):
        read_mask(tmp_path / "bad.png")
    with pytest.raises(ValueError, match="mask"):
        write_mask(tmp_path / "x.png", np.zeros((2, 2, 2), np.uint8))
    with pytest.raises(ValueError, match="image_id"):
        mask_filename("../escape.png")


def test_folder_round_trip(tmp_path) -> None:
    masks = {"a/b/one.jpg": sample_mask(2), "two.png": sample_mask(3)}
    write_masks(tmp_path / "masks", masks, classes=CLASSES)
    assert (tmp_path / "masks" / "a" / "b" / "one.png").is_file()
    back = read_masks(tmp_path / "masks", list(masks), classes=CLASSES)
    for k in masks:
        np.testing.assert_array_equal(back[k], masks[k])
    assert set(read_masks(tmp_path / "masks")) == {"a/b/one", "two"}
    with pytest.raises(ValueError, match="ids"):
        read_masks(tmp_path / "masks", ["missing.png"])


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**16), st.integers(1, 40), st.integers(1, 40))
def test_round_trip_any_mask(seed: int, h: int, w: int) -> None:
    m = np.random.default_rng(seed).choice([0, 1, 2, 3, 255], size=(h, w)).astype(np.uint8)
    with tempfile.TemporaryDirectory() as d:
        p = write_mask(Path(d) / "m.png", m, classes=CLASSES)
        np.testing.assert_array_equal(read_mask(p, classes=CLASSES), m)
