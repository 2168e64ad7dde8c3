"""The scan reads each pool file once (`ImagePool.iter_hashed_items`): the same images, hashes and
error reasons as `iter_items` followed by `content_hash`."""
from __future__ import annotations

import os

import numpy as np
from PIL import Image

from blindspots.data import ImagePool


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


def test_large_file_goes_through_load_first(tmp_path, monkeypatch):
    """A file above ONE_READ_MAX_BYTES is not read whole before its header is checked: `load` decides."""
    import numpy as np
    from PIL import Image

    from blindspots.data.sources import folder as pool_mod

    Image.fromarray(np.full((8, 8, 3), 7, np.uint8)).save(tmp_path / "a.png")
    (tmp_path / "b.png").write_bytes(b"not an image" * 100)
    p = pool_mod.ImagePool(tmp_path)
    expected = {i: p.content_hash(i) for i in ("a.png",)}
    monkeypatch.setattr(pool_mod, "ONE_READ_MAX_BYTES", 16)  # every file is "large" now
    read_whole = []
    real = pool_mod.Path.read_bytes
    monkeypatch.setattr(pool_mod.Path, "read_bytes", lambda self: read_whole.append(self.name) or real(self))
    image, digest = p.load_hashed("a.png")
    assert image.shape == (8, 8, 3) and digest == expected["a.png"]
    items = {it.id: it for it in p.iter_hashed_items(["a.png", "b.png"])}
    assert items["b.png"].image is None and "not an image" in items["b.png"].error
    assert read_whole == []
