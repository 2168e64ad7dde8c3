"""ImagePool and decode_image: formats, EXIF, modes, bad files, ids, list files, links."""
from __future__ import annotations

import io
import os
import re
import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from blindspots.data import ImageDecodeError, ImagePool, PoolItem, decode_image
from blindspots.data.sources.decode import pillow_extensions


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def header_only_png(width: int, height: int) -> bytes:
    """A PNG whose header claims width × height RGB pixels, with a few bytes of data only."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", zlib.compress(b"\0" * 16))


def jpeg_bytes(arr: np.ndarray, orientation: int | None = None) -> bytes:
    buf = io.BytesIO()
    kwargs = {"quality": 90}
    if orientation is not None:
        exif = Image.Exif()
        exif[0x0112] = orientation
        kwargs["exif"] = exif.tobytes()
    Image.fromarray(arr).save(buf, format="JPEG", **kwargs)
    return buf.getvalue()


def blocks(h: int, w: int, seed: int = 0) -> np.ndarray:
    """uint8 [h, w, 3] of flat 8×8 blocks (survives JPEG well)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    return np.kron(small, np.ones((8, 8, 1), dtype=np.uint8))


# --- decode_image: modes and orientation -------------------------------------------------------

def test_png_rgb_roundtrip_exact(tmp_path, write_image):
    arr = np.random.default_rng(1).integers(0, 256, (32, 48, 3), dtype=np.uint8)
    path = write_image(tmp_path / "a.png", arr)
    out = decode_image(path)
    assert out.dtype == np.uint8 and out.shape == (32, 48, 3)
    assert np.array_equal(out, arr)
    assert np.array_equal(decode_image(path.read_bytes()), arr)


@pytest.mark.parametrize("orientation, rot_k, transpose", [(1, 0, False), (3, 2, False), (6, -1, False),
                                                          (8, 1, False), (2, 0, True)])
def test_exif_orientation_applied(tmp_path, orientation, rot_k, transpose):
    arr = blocks(24, 40)
    plain = decode_image(jpeg_bytes(arr))  # same JPEG data, no orientation tag
    out = decode_image(jpeg_bytes(arr, orientation))
    if transpose:  # orientation 2 = mirrored horizontally
        expected = plain[:, ::-1]
    else:
        expected = np.rot90(plain, k=rot_k)
    assert out.shape == expected.shape
    assert np.array_equal(out, expected)
    if orientation in (6, 8):
        assert out.shape == (40, 24, 3)


def test_grey_and_bilevel_become_rgb(tmp_path, write_image):
    grey = np.arange(32 * 32, dtype=np.uint32).reshape(32, 32) % 256
    out = decode_image(write_image(tmp_path / "g.png", grey.astype(np.uint8)))
    assert out.shape == (32, 32, 3) and np.array_equal(out[..., 0], grey) and np.array_equal(out[..., 2], grey)
    bw = Image.fromarray((grey > 100).astype(np.uint8) * 255).convert("1")
    out = decode_image(write_image(tmp_path / "b.bmp", bw))
    assert set(np.unique(out).tolist()) == {0, 255}


def test_rgba_composited_over_white(tmp_path, write_image):
    rgba = np.zeros((32, 32, 4), dtype=np.uint8)
    rgba[..., 0] = 200
    rgba[:, :10, 3] = 0      # transparent -> white
    rgba[:, 10:20, 3] = 255  # opaque -> its colour
    rgba[:, 20:, 3] = 128    # half -> blend
    out = decode_image(write_image(tmp_path / "a.png", rgba))
    assert np.all(out[:, :10] == 255)
    assert np.all(out[:, 10:20] == [200, 0, 0])
    half = [round((200 * 128 + 255 * 127) / 255), round(255 * 127 / 255), round(255 * 127 / 255)]
    assert np.all(out[:, 20:] == half)


def test_sixteen_bit_scaled_by_type_range(tmp_path, write_image):
    values = np.array([[0, 257, 1000, 32768, 65535, 60000]], dtype=np.uint16).repeat(4, axis=0)
    path = write_image(tmp_path / "deep.png", Image.fromarray(values))
    assert Image.open(path).mode.startswith("I")
    out = decode_image(path)
    expected = np.round(values / 257).astype(np.uint8)
    assert np.array_equal(out[..., 0], expected) and np.array_equal(out[..., 1], expected)
    # no per-image stretch: a dark 16-bit image stays dark
    dark = np.full((8, 8), 2570, dtype=np.uint16)
    assert np.all(decode_image(write_image(tmp_path / "dark.png", Image.fromarray(dark))) == 10)
    # mode 'I' (32-bit) is read as 16-bit samples, clipped
    i32 = Image.fromarray(np.array([[-5, 514, 70000]], dtype=np.int32))
    assert i32.mode == "I"
    buf = io.BytesIO()
    i32.save(buf, format="TIFF")
    assert decode_image(buf.getvalue())[0, :, 0].tolist() == [0, 2, 255]


def test_palette_png_expanded(tmp_path, write_image):
    idx = (np.arange(32 * 32).reshape(32, 32) % 5).astype(np.uint8)
    img = Image.frombytes("P", (32, 32), idx.tobytes())
    img.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255, 9, 9, 9] + [0] * (3 * 251))
    path = write_image(tmp_path / "p.png", img)
    assert Image.open(path).mode == "P"
    out = decode_image(path)
    lut = np.array([[0, 0, 0], [255, 0, 0], [0, 255, 0], [0, 0, 255], [9, 9, 9]], dtype=np.uint8)
    assert np.array_equal(out, lut[idx])
    # a transparent palette index (as in GIFs) is composited over white like any alpha
    path = write_image(tmp_path / "t.gif", img, transparency=4)
    lut[4] = 255
    assert np.array_equal(decode_image(path), lut[idx])


def test_real_photographs_decode():
    import sklearn.datasets

    folder = Path(sklearn.datasets.__file__).parent / "images"
    for name in ("china.jpg", "flower.jpg"):
        out = decode_image(folder / name)
        assert out.shape == (427, 640, 3) and out.dtype == np.uint8 and out.std() > 10


# --- decode_image: bad files -------------------------------------------------------------------

def truncated_jpeg() -> bytes:
    data = jpeg_bytes(np.random.default_rng(0).integers(0, 256, (48, 48, 3), dtype=np.uint8))
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    "content, reason",
    [
        (b"", "empty file"),
        (b"hello, I am text\n" * 3, "not an image"),
        (b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 2, "not an image|corrupt"),
        (truncated_jpeg(), "truncated"),
        (header_only_png(100_000, 100_000), "too many pixels"),
        (header_only_png(64, 64), "truncated|corrupt"),
    ],
    ids=["empty", "text", "corrupt", "truncated-jpeg", "huge-header", "header-only-small"],
)
def test_bad_bytes_raise_decode_error(tmp_path, content, reason):
    path = tmp_path / "x.png"
    path.write_bytes(content)
    for source in (path, content):
        with pytest.raises(ImageDecodeError, match=reason) as info:
            decode_image(source)
        assert isinstance(info.value, ValueError) and info.value.reason


def test_max_pixels_checked_before_decoding(tmp_path, write_image):
    path = write_image(tmp_path / "a.png", np.zeros((32, 32, 3), dtype=np.uint8))
    with pytest.raises(ImageDecodeError, match=r"too many pixels \(32×32 = 1,024 > max_pixels=1,000\)"):
        decode_image(path, max_pixels=1000)
    assert decode_image(path, max_pixels=1024).shape == (32, 32, 3)
    assert Image.MAX_IMAGE_PIXELS == 89_478_485 or Image.MAX_IMAGE_PIXELS is None  # untouched
    with pytest.raises(ValueError, match="max_pixels"):
        decode_image(path, max_pixels=0)


def test_missing_file_and_bad_source(tmp_path):
    with pytest.raises(ImageDecodeError, match="file not found"):
        decode_image(tmp_path / "nope.png")
    with pytest.raises(ImageDecodeError, match="not a regular file"):
        decode_image(tmp_path)
    with pytest.raises(ValueError, match="source"):
        decode_image(123)  # type: ignore[arg-type]


# --- the pool ----------------------------------------------------------------------------------

def build_mixed_pool(root: Path, write_image) -> dict[str, str | None]:
    """Every kind of file the issue names; returns {id: None for good, reason regex for bad}."""
    rng = np.random.default_rng(0)
    rgb = rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)
    write_image(root / "a.png", rgb)
    write_image(root / "nested/deeper/b.jpg", jpeg_bytes(blocks(24, 40), orientation=6))
    write_image(root / "nested/grey.png", rgb[..., 0])
    write_image(root / "nested/alpha.png", np.dstack([rgb, rgb[..., 0]]))
    write_image(root / "deep16.png", Image.fromarray((rgb[..., 0].astype(np.uint16) * 257)))
    write_image(root / "pal.png", Image.fromarray(rgb).convert("P"))
    write_image(root / "Z.JPEG", jpeg_bytes(rgb))
    write_image(root / "bad/corrupt.png", b"\x89PNG\r\n\x1a\n" + rng.bytes(300))
    write_image(root / "bad/truncated.jpg", truncated_jpeg())
    write_image(root / "bad/empty.png", b"")
    write_image(root / "bad/text.png", b"not an image at all")
    write_image(root / "bad/huge.png", header_only_png(100_000, 100_000))
    write_image(root / "bad/big.png", np.zeros((64, 64, 3), dtype=np.uint8))  # > max_pixels below
    # not collected: other extensions, hidden files and folders
    write_image(root / "notes.txt", b"hello")
    write_image(root / ".hidden.png", rgb)
    write_image(root / ".cache/c.png", rgb)
    return {
        "a.png": None, "nested/deeper/b.jpg": None, "nested/grey.png": None, "nested/alpha.png": None,
        "deep16.png": None, "pal.png": None, "Z.JPEG": None,
        "bad/corrupt.png": "not an image|corrupt", "bad/truncated.jpg": "truncated",
        "bad/empty.png": "empty file", "bad/text.png": "not an image", "bad/huge.png": "too many pixels",
        "bad/big.png": "too many pixels",
    }


def test_pool_reads_good_and_records_bad(tmp_path, write_image):
    expected = build_mixed_pool(tmp_path, write_image)
    pool = ImagePool(tmp_path, max_pixels=64 * 64 - 1)
    assert pool.ids == sorted(expected)
    assert len(pool) == len(expected) and "a.png" in pool
    items = list(pool.iter_items(progress=True))  # completes despite the bad files
    assert [it.id for it in items] == pool.ids
    for item in items:
        assert isinstance(item, PoolItem)
        if expected[item.id] is None:
            assert item.ok and item.error is None
            assert item.image.dtype == np.uint8 and item.image.ndim == 3 and item.image.shape[2] == 3
        else:
            assert item.image is None and not item.ok
            assert re.search(expected[item.id], item.error), (item.id, item.error)
    assert set(pool.errors) == {k for k, v in expected.items() if v is not None}
    by_id = {it.id: it.image for it in items}
    assert by_id["nested/deeper/b.jpg"].shape == (40, 24, 3)  # EXIF rotation applied
    assert np.array_equal(by_id["nested/grey.png"][..., 1], by_id["a.png"][..., 0])
    assert np.array_equal(by_id["deep16.png"], by_id["nested/grey.png"])  # v*257 / 257 == v


def test_pool_load_raises_and_subset_iteration(tmp_pool):
    root = tmp_pool(n=5, bad=True)
    pool = ImagePool(root)
    assert pool.ids == sorted(pool.ids) and any(i.startswith("sub/") for i in pool.ids)
    with pytest.raises(ImageDecodeError, match="bad/empty.png: empty file"):
        pool.load("bad/empty.png")
    assert pool.errors == {"bad/empty.png": "empty file (0 bytes)"}
    good = [i for i in pool.ids if not i.startswith("bad/")]
    # resume: read only what is left
    got = [it.id for it in pool.iter_items(good[2:])]
    assert got == good[2:]
    with pytest.raises(ValueError, match="ids: .*unknown"):
        list(pool.iter_items(["no/such.png"]))
    assert all(it.ok == (not it.id.startswith("bad/")) for it in pool)


def test_path_refuses_ids_outside_the_pool(tmp_pool):
    root = tmp_pool(n=2)
    (root.parent / "secret.png").write_bytes(b"x")
    pool = ImagePool(root)
    assert pool.path("img_000.png") == root.resolve() / "img_000.png"
    for bad in ["../secret.png", str(root.parent / "secret.png"), "img_000.png/..", "missing.png", ""]:
        with pytest.raises(ValueError, match="image_id"):
            pool.path(bad)


@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_symlinks_outside_root_are_excluded(tmp_path, write_image):
    root = tmp_path / "pool"
    outside = write_image(tmp_path / "outside/o.png", np.zeros((8, 8, 3), dtype=np.uint8))
    inside = write_image(root / "in.png", np.zeros((8, 8, 3), dtype=np.uint8))
    (root / "link_out.png").symlink_to(outside)
    (root / "link_in.png").symlink_to(inside)
    (root / "linked_dir").symlink_to(outside.parent, target_is_directory=True)
    pool = ImagePool(root)
    assert pool.ids == ["in.png", "link_in.png"]
    assert "outside" in pool.excluded["link_out.png"] and "linked_dir" in pool.excluded
    # a file swapped for an outside link after the pool was built is refused when read
    inside.unlink()
    inside.symlink_to(outside)
    item = next(iter(pool.iter_items(["in.png"])))
    assert item.image is None and "outside" in item.error


def test_list_file(tmp_pool, tmp_path):
    root = tmp_pool(n=6)
    listing = tmp_path / "list.txt"
    listing.write_text(
        "# a comment\n\nimg_000.png\n  img_001.png  \n"
        f"{root / 'sub' / 'img_003.png'}\n./img_004.jpg\nimg_000.png\ngone.png\n"
    )
    pool = ImagePool(root, list_file=listing)
    assert pool.ids == ["gone.png", "img_000.png", "img_001.png", "img_004.jpg", "sub/img_003.png"]
    items = {it.id: it for it in pool.iter_items()}
    assert items["gone.png"].error == "file not found" and items["img_000.png"].ok
    listing.write_text("img_000.png\n../escape.png\n/etc/passwd\n")
    with pytest.raises(ValueError, match=r"list_file: .*2 outside.*escape"):
        ImagePool(root, list_file=listing)
    with pytest.raises(ValueError, match="list_file"):
        ImagePool(root, list_file=tmp_path / "missing.txt")


def test_extensions_and_validation(tmp_pool, tmp_path):
    root = tmp_pool(n=6)
    assert all(i.endswith(".jpg") for i in ImagePool(root, extensions=["JPG"]).ids)
    assert len(ImagePool(root, extensions=".png").ids) == 4
    assert {".png", ".jpg", ".jpeg", ".tif", ".webp", ".bmp", ".gif", ".pgm"} <= pillow_extensions()
    assert not {".h5", ".eps", ".mpg", ".txt"} & pillow_extensions()
    with pytest.raises(ValueError, match="root"):
        ImagePool(tmp_path / "nope")
    with pytest.raises(ValueError, match="extensions"):
        ImagePool(root, extensions=[])
    with pytest.raises(ValueError, match="max_pixels"):
        ImagePool(root, max_pixels=-1)


def test_real_photos_pool(tmp_path):
    import sklearn.datasets

    folder = Path(sklearn.datasets.__file__).parent / "images"
    for name in ("china.jpg", "flower.jpg"):
        shutil.copy(folder / name, tmp_path / name)
    pool = ImagePool(tmp_path)
    assert pool.ids == ["china.jpg", "flower.jpg"]
    imgs = [it.image for it in pool.iter_items()]
    assert all(im is not None and im.shape == (427, 640, 3) for im in imgs)
    assert not pool.errors


def _encoded(fmt: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(blocks(32, 32, seed=5)).save(buf, format=fmt)
    return buf.getvalue()


_VALID = {fmt: _encoded(fmt) for fmt in ("PNG", "JPEG", "GIF", "BMP", "TIFF", "WEBP")}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(_VALID)), st.data())
def test_damaged_files_never_raise_anything_but_decode_error(fmt, data):
    """Truncation or byte flips of a valid file: either a valid RGB image or ImageDecodeError."""
    raw = bytearray(_VALID[fmt])
    cut = data.draw(st.integers(0, len(raw)), label="cut")
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)), max_size=4),
                      label="flips")
    for pos, val in flips:
        raw[pos] = val
    damaged = bytes(raw[:cut])
    try:
        out = decode_image(damaged, max_pixels=1_000_000)
    except ImageDecodeError as exc:
        assert exc.reason
    else:
        assert out.dtype == np.uint8 and out.ndim == 3 and out.shape[2] == 3 and out.size <= 3_000_000


def test_a_link_out_of_the_pool_is_warned_about_when_read(tmp_path, caplog):
    """A pool of links to photos elsewhere gave only error rows: nothing said why while scanning."""
    import logging

    (tmp_path / "pool").mkdir()
    (tmp_path / "elsewhere").mkdir()
    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "elsewhere" / "a.png")
    (tmp_path / "pool" / "a.png").symlink_to(tmp_path / "elsewhere" / "a.png")
    pool = ImagePool(tmp_path / "pool")
    with caplog.at_level(logging.WARNING, logger="blindspots.data.sources.folder"):
        items = list(pool.iter_items(["a.png"]))
    assert items[0].image is None and "outside the pool root" in items[0].error
    assert "skipping a.png: symlink pointing outside the pool root" in caplog.text
    assert "scan the folder they point into" in caplog.text
