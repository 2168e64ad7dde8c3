"""SegmentationSet and decode_mask: pairing, index / VOC palette / RGB masks, errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from blindspots.data.classes import Classes, voc_palette
from blindspots.data import ImageDecodeError
from blindspots.data.segsets import VOC_VOID, SegmentationSet, decode_mask

CLASSES = Classes(("background", "road", "car"), palette=np.array([[0, 0, 0], [128, 64, 128], [0, 0, 142]]))


def random_mask(rng: np.random.Generator, h: int = 32, w: int = 32, k: int = 3) -> np.ndarray:
    mask = rng.integers(0, k, (h, w)).astype(np.uint8)
    mask[:3] = 255  # a void band
    return mask


def palette_png(mask: np.ndarray) -> Image.Image:
    img = Image.fromarray(mask).convert("L")
    img = Image.frombytes("P", img.size, img.tobytes())
    img.putpalette(voc_palette(256).ravel().tolist())
    return img


def make_set(root: Path, write_image, n: int = 4, seed: int = 0, mask_kind: str = "L",
             image_ext: str = ".png") -> dict[str, np.ndarray]:
    """Writes images/ and masks/ with n pairs (some nested); returns {id: mask}."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in range(n):
        item_id = f"city{i % 2}/frame_{i:02d}"
        mask = random_mask(rng)
        write_image(root / "images" / f"{item_id}{image_ext}", rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
        if mask_kind == "L":
            content = Image.fromarray(mask)
        elif mask_kind == "P":
            content = palette_png(mask)
        else:  # colour-coded RGB, void drawn white
            content = Image.fromarray(CLASSES.colorize(mask))
        write_image(root / "masks" / f"{item_id}.png", content)
        out[item_id] = mask
    return out


@pytest.mark.parametrize("mask_kind", ["L", "P", "RGB"])
def test_reads_pairs_for_every_mask_kind(tmp_path, write_image, mask_kind):
    masks = make_set(tmp_path, write_image, mask_kind=mask_kind, image_ext=".jpg")
    ds = SegmentationSet(tmp_path / "images", tmp_path / "masks", classes=CLASSES)
    assert ds.ids == sorted(masks) and len(ds) == 4
    for item_id in ds.ids:
        image, mask = ds.load(item_id)
        assert image.dtype == np.uint8 and image.shape == (32, 32, 3)
        assert mask.dtype == np.uint8 and np.array_equal(mask, masks[item_id])
    image, mask = ds[-1]
    assert np.array_equal(mask, masks[ds.ids[-1]])
    assert sum(1 for _ in ds) == 4
    assert ds.image_path(ds.ids[0]).suffix == ".jpg" and ds.mask_path(ds.ids[0]).suffix == ".png"


def test_voc_palette_gives_indices_directly(tmp_path, write_image):
    mask = np.array([[0, 15, 20, 255]] * 4, dtype=np.uint8)
    path = write_image(tmp_path / "m.png", palette_png(mask))
    assert Image.open(path).mode == "P"
    assert np.array_equal(decode_mask(path), mask)  # no classes needed, palette ignored
    voc = Classes(tuple(f"c{i}" for i in range(21)))
    assert np.array_equal(decode_mask(path, classes=voc), mask)


def test_rgb_void_colours_and_unknown_colour(tmp_path, write_image):
    rgb = np.zeros((4, 5, 3), dtype=np.uint8)
    rgb[:, 1] = (128, 64, 128)
    rgb[:, 2] = (0, 0, 142)
    rgb[:, 3] = (255, 255, 255)
    rgb[:, 4] = VOC_VOID
    path = write_image(tmp_path / "m.png", rgb)
    assert decode_mask(path, classes=CLASSES)[0].tolist() == [0, 1, 2, 255, 255]
    rgb[0, 0] = (1, 2, 3)
    bad = write_image(tmp_path / "bad.png", rgb)
    with pytest.raises(ValueError, match=r"bad\.png.*\(1, 2, 3\)"):
        decode_mask(bad, classes=CLASSES)
    with pytest.raises(ValueError, match="classes: .*RGB"):
        decode_mask(path)
    # a class that is drawn white keeps its id
    white_cls = Classes(("a", "b"), palette=np.array([[0, 0, 0], [255, 255, 255]]))
    assert decode_mask(write_image(tmp_path / "w.png", rgb[1:, [0, 3]]),
                       classes=white_cls)[0].tolist() == [0, 1]
    dup = Classes(("a", "b"), palette=np.array([[0, 0, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="classes: .*distinct"):
        decode_mask(path, classes=dup)


def test_index_values_checked_against_classes(tmp_path, write_image):
    path = write_image(tmp_path / "m.png", np.array([[0, 1, 7, 255]], dtype=np.uint8))
    assert decode_mask(path).tolist() == [[0, 1, 7, 255]]
    with pytest.raises(ValueError, match=r"m\.png.*\[7\]"):
        decode_mask(path, classes=CLASSES)
    deep = write_image(tmp_path / "d.png", Image.fromarray(np.array([[0, 2, 255]], dtype=np.uint16)))
    assert decode_mask(deep).tolist() == [[0, 2, 255]]
    too_deep = write_image(tmp_path / "dd.png", Image.fromarray(np.array([[0, 300]], dtype=np.uint16)))
    with pytest.raises(ValueError, match="0..255"):
        decode_mask(too_deep)
    (tmp_path / "broken.png").write_bytes(b"")
    with pytest.raises(ImageDecodeError, match="empty"):
        decode_mask(tmp_path / "broken.png")


def test_missing_and_orphan_masks_listed(tmp_path, write_image):
    masks = make_set(tmp_path, write_image, n=8)
    gone = sorted(masks)[:6]
    for item_id in gone:
        (tmp_path / "masks" / f"{item_id}.png").rename(tmp_path / "masks" / f"{item_id}_x.png")
    with pytest.raises(ValueError, match=r"masks_dir: .*6 image\(s\) without a mask.*and 1 more.*"
                                         r"6 mask\(s\) without an image"):
        SegmentationSet(tmp_path / "images", tmp_path / "masks")
    # a VOC-style list file selects the pairs that exist
    listing = tmp_path / "train.txt"
    keep = sorted(masks)[6:]
    listing.write_text("# split\n" + "\n".join(keep) + "\n")
    ds = SegmentationSet(tmp_path / "images", tmp_path / "masks", ids=listing)
    assert ds.ids == keep
    with pytest.raises(ValueError, match="ids: .*1 without"):
        SegmentationSet(tmp_path / "images", tmp_path / "masks", ids=keep + [gone[0]])


def test_duplicate_stems_size_mismatch_and_validation(tmp_path, write_image):
    masks = make_set(tmp_path, write_image, n=2)
    first = sorted(masks)[0]
    write_image(tmp_path / "images" / f"{first}.jpg", np.zeros((32, 32, 3), dtype=np.uint8))
    with pytest.raises(ValueError, match="images_dir: .*one image per name"):
        SegmentationSet(tmp_path / "images", tmp_path / "masks")
    (tmp_path / "images" / f"{first}.jpg").unlink()
    write_image(tmp_path / "masks" / f"{first}.png", np.zeros((16, 32), dtype=np.uint8))
    ds = SegmentationSet(tmp_path / "images", tmp_path / "masks")
    with pytest.raises(ValueError, match=r"mask: .*\(32, 32\).*\(16, 32\)"):
        ds.load(first)
    with pytest.raises(IndexError):
        ds[2]
    with pytest.raises(ValueError, match="item_id"):
        ds.load("../etc/passwd")
    with pytest.raises(ValueError, match="index"):
        ds["0"]  # type: ignore[index]
    with pytest.raises(ValueError, match="images_dir"):
        SegmentationSet(tmp_path / "nope", tmp_path / "masks")
    with pytest.raises(ValueError, match="mask_suffix"):
        SegmentationSet(tmp_path / "images", tmp_path / "masks", mask_suffix="png")
    with pytest.raises(ValueError, match="classes"):
        SegmentationSet(tmp_path / "images", tmp_path / "masks", classes=["a", "b"])  # type: ignore[arg-type]
    (tmp_path / "empty_i").mkdir()
    (tmp_path / "empty_m").mkdir()
    with pytest.raises(ValueError, match="at least one"):
        SegmentationSet(tmp_path / "empty_i", tmp_path / "empty_m")


def test_same_folder_with_mask_suffix(tmp_path, write_image):
    rng = np.random.default_rng(3)
    for name in ("a", "b/c"):
        write_image(tmp_path / f"{name}.png", rng.integers(0, 256, (32, 32, 3), dtype=np.uint8))
        write_image(tmp_path / f"{name}_mask.png", random_mask(rng))
    ds = SegmentationSet(tmp_path, tmp_path, mask_suffix="_mask.png")
    assert ds.ids == ["a", "b/c"]
    assert ds[1][1].shape == (32, 32)


def test_real_digits_as_segmentation_set(tmp_path, write_image):
    """Real handwritten digits (scikit-learn) as a 11-class segmentation set: stroke = digit class."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    expected = {}
    for i in range(6):
        img = np.kron(digits.images[i], np.ones((4, 4)))  # 8×8 -> 32×32, values 0..16
        grey = (img * 255 / 16).astype(np.uint8)
        mask = np.where(img > 4, digits.target[i] + 1, 0).astype(np.uint8)
        mask[(img > 0) & (img <= 4)] = 255  # faint edge pixels: ambiguous, ignored
        write_image(tmp_path / "images" / f"{i:04d}.png", grey)
        write_image(tmp_path / "masks" / f"{i:04d}.png", mask)
        expected[f"{i:04d}"] = (grey, mask)
    classes = Classes(("background",) + tuple(str(d) for d in range(10)))
    ds = SegmentationSet(tmp_path / "images", tmp_path / "masks", classes=classes)
    assert ds.ids == sorted(expected)
    for item_id in ds.ids:
        image, mask = ds.load(item_id)
        assert np.array_equal(image[..., 0], expected[item_id][0])  # grey -> RGB
        assert np.array_equal(mask, expected[item_id][1])
