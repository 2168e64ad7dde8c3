"""The scan reads each pool file once (`ImagePool.iter_hashed_items`): the same images, hashes and
error reasons as `iter_items` followed by `content_hash`."""
from __future__ import annotations

import os

import numpy as np
from PIL import Image

from blindspots.data.pool import ImagePool


def test_hashed_items_equal_two_reads(tmp_path) -> None:
    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (20 + i, 30, 3), dtype=np.uint8)).save(tmp_path / f"ok{i}.png")
    Image.fromarray(rng.integers(0, 255, (16, 16), dtype=np.uint8)).save(tmp_path / "grey.jpg")
    (tmp_path / "empty.png").write_bytes(b"")
    (tmp_path / "junk.png").write_bytes(b"not an image at all")
    good = (tmp_path / "ok0.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(good[: len(good) // 2])
    os.symlink(tmp_path / "gone.png", tmp_path / "dangling.png")
    pool = ImagePool(tmp_path)
    plain = list(pool.iter_items())
    errors = dict(pool.errors)
    pool.errors.clear()
    hashed = list(ImagePool(tmp_path).iter_hashed_items())
    pool2 = ImagePool(tmp_path)
    list(pool2.iter_hashed_items())
    assert pool2.errors == errors and len(errors) == 4
    assert [(h.id, h.error) for h in hashed] == [(p.id, p.error) for p in plain]
    for p, h in zip(plain, hashed):
        if p.image is None:
            assert h.image is None and h.content_hash is None
        else:
            assert np.array_equal(p.image, h.image) and h.content_hash == pool.content_hash(p.id)
    assert all(p.content_hash is None for p in plain)
