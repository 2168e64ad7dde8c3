"""CVAT Segmentation Mask 1.1 export / import."""
from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from PIL import Image

from blindspots.data.classes import Classes
from blindspots.data.formats.cvat import export_cvat, import_cvat, parse_labelmap

CLASSES = Classes(("sky", "road", "building", "car"))  # VOC palette: class 0 is black


def masks() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for name in ("scene_0001.png", "sub/scene_0002.jpg"):
        m = rng.integers(0, 4, (48, 64)).astype(np.uint8)
        m[:4] = 255
        out[name] = m
    return out


def test_round_trip(tmp_path) -> None:
    ms = masks()
    images = {k: np.full(m.shape + (3,), 7, np.uint8) for k, m in ms.items()}
    z = export_cvat(tmp_path / "s.zip", ms, CLASSES, images=images)
    with zipfile.ZipFile(z) as zf:
        names = set(zf.namelist())
        assert {"labelmap.txt", "ImageSets/Segmentation/default.txt", "SegmentationClass/scene_0001.png",
                "SegmentationObject/sub/scene_0002.png", "JPEGImages/scene_0001.png"} <= names
        assert zf.read("ImageSets/Segmentation/default.txt").decode().split() == ["scene_0001", "sub/scene_0002"]
        lm = parse_labelmap(zf.read("labelmap.txt").decode())
        assert zf.read("labelmap.txt").decode().startswith("# label:color_rgb:parts:actions\nbackground:0,0,0::")
        cls = np.asarray(Image.open(io.BytesIO(zf.read("SegmentationClass/scene_0001.png"))))
        assert cls.shape == (48, 64, 3)
        obj = np.asarray(Image.open(io.BytesIO(zf.read("SegmentationObject/scene_0001.png"))))
        assert len(np.unique(obj.reshape(-1, 3), axis=0)) > 4  # instances, not classes
    # 'sky' was black in the VOC palette; CVAT's background is black, so it must move
    assert lm["sky"] != (0, 0, 0) and len(set(lm.values())) == len(lm)
    back = import_cvat(z, CLASSES, ids=list(ms))
    assert set(back) == set(ms)
    for k in ms:
        np.testing.assert_array_equal(back[k], ms[k])
    assert set(import_cvat(z, CLASSES)) == {"scene_0001", "sub/scene_0002"}


def test_background_class_and_folder(tmp_path) -> None:
    classes = Classes(("background", "person"))
    m = np.zeros((8, 8), np.uint8)
    m[2:5, 2:5] = 1
    m[0, 0] = 255
    z = export_cvat(tmp_path / "v.zip", {"a.png": m}, classes)
    with zipfile.ZipFile(z) as zf:
        lm = parse_labelmap(zf.read("labelmap.txt").decode())
        zf.extractall(tmp_path / "x" / "wrapped")
    assert lm["background"] == (0, 0, 0) and lm["ignore"] == (224, 224, 192)
    np.testing.assert_array_equal(import_cvat(tmp_path / "x", classes)["a"], m)


def test_import_errors(tmp_path) -> None:
    z = export_cvat(tmp_path / "s.zip", masks(), CLASSES)
    with pytest.raises(ValueError, match="labels"):
        import_cvat(z, Classes(("sky", "road")))
    with pytest.raises(ValueError, match="ids"):
        import_cvat(z, CLASSES, ids=["scene_0001.png"])
    (tmp_path / "no.zip").write_bytes(b"nope")
    with pytest.raises(ValueError, match="path"):
        import_cvat(tmp_path / "no.zip", CLASSES)
    with pytest.raises(ValueError, match="line 2"):
        parse_labelmap("# header\nsky:1,2::\n")
    # a painted colour CVAT's labelmap does not know
    buf = io.BytesIO()
    Image.fromarray(np.full((4, 4, 3), 9, np.uint8)).save(buf, format="PNG")
    with zipfile.ZipFile(tmp_path / "odd.zip", "w") as zf:
        zf.writestr("labelmap.txt", "background:0,0,0::\nsky:1,2,3::\n")
        zf.writestr("SegmentationClass/a.png", buf.getvalue())
    with pytest.raises(ValueError, match="colour"):
        import_cvat(tmp_path / "odd.zip", CLASSES)
    with pytest.raises(ValueError, match="masks"):
        export_cvat(tmp_path / "e.zip", {}, CLASSES)


def test_export_images_must_be_a_mapping(tmp_path) -> None:
    """images="folder" (as the docs' `images=...` invites) used to export a zip without any image."""
    m = np.zeros((4, 4), np.uint8)
    with pytest.raises(ValueError, match=r"images: expected a mapping image id -> uint8 \[H, W, 3\] array, got str"):
        export_cvat(tmp_path / "a.zip", {"cat": m}, CLASSES, images=str(tmp_path))
    p = export_cvat(tmp_path / "b.zip", {"cat": m}, CLASSES, images={"cat": np.zeros((4, 4, 3), np.uint8)})
    assert "JPEGImages/cat.png" in zipfile.ZipFile(p).namelist()
