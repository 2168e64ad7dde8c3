"""Extra columns added to a finished scan: joined by read_score_table, NaN for bad images, resumable."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from blindspots.data import ImagePool
from blindspots.scan import read_score_table, scan_pool
from blindspots.scan.extra import add_columns
from blindspots.scan.table import ScanLayout
from test_scan import make_models, make_pool


def brightness(calls: list[int]):
    def compute(images: np.ndarray) -> dict[str, np.ndarray]:
        calls.append(len(images))
        return {"bright__t": images.mean(axis=(1, 2, 3)), "red__t": images[..., 0].mean(axis=(1, 2))}
    return compute


@pytest.fixture()
def scanned(tmp_path: Path):
    pool = ImagePool(make_pool(tmp_path / "pool", n=20, sizes=(32, 24)))
    out = scan_pool(pool, make_models(), tmp_path / "scan", target="t", batch_size=4, shard_size=6, progress=False)
    return pool, out


def test_columns_join_the_score_table(scanned):
    pool, out = scanned
    calls: list[int] = []
    cols = add_columns(out, pool, "bright", brightness(calls), batch_size=4, progress=False)
    assert cols == ["bright__t", "red__t"] and max(calls) <= 4
    df = read_score_table(out)
    assert len(df) == 21
    ok = df["status"] == "ok"
    expect = np.array([pool.load(i).mean() for i in df.loc[ok, "id"]], dtype=np.float32)
    np.testing.assert_allclose(df.loc[ok, "bright__t"].to_numpy(), expect, rtol=1e-6)
    assert df.loc[~ok, "bright__t"].isna().all() and (~ok).sum() == 1


def test_resume_computes_only_missing_shards(scanned):
    pool, out = scanned
    add_columns(out, pool, "bright", brightness([]), progress=False)
    full = read_score_table(out)
    ScanLayout(out).extra_shard("bright", 1).unlink()  # as if killed before shard 1 was written
    assert "bright__t" not in read_score_table(out).columns  # an incomplete part is not read
    calls: list[int] = []
    add_columns(out, pool, "bright", brightness(calls), progress=False)
    assert sum(calls) == 6  # shard 1 only (6 readable images)
    again = read_score_table(out)
    np.testing.assert_array_equal(again["bright__t"].to_numpy(), full["bright__t"].to_numpy())


def test_errors(scanned, tmp_path: Path):
    pool, out = scanned
    other = ImagePool(make_pool(tmp_path / "other", n=5, bad=False))
    with pytest.raises(ValueError, match="pool: expected the pool that was scanned"):
        add_columns(out, other, "bright", brightness([]), progress=False)
    with pytest.raises(ValueError, match="part"):
        add_columns(out, pool, "Bad Name", brightness([]), progress=False)
    with pytest.raises(ValueError, match="scan's own columns"):
        add_columns(out, pool, "clash", lambda im: {"entropy__t": im.mean(axis=(1, 2, 3))}, progress=False)
    with pytest.raises(ValueError, match="shape"):
        add_columns(out, pool, "short", lambda im: {"x": np.zeros(1)}, progress=False)
    with pytest.raises(ValueError, match="out_dir"):
        add_columns(tmp_path / "nowhere", pool, "bright", brightness([]), progress=False)


def test_images_are_resized_as_the_scan_resized_them(tmp_path: Path):
    pool = ImagePool(make_pool(tmp_path / "pool", n=6, sizes=(32, 24), bad=False))
    out = scan_pool(pool, make_models(), tmp_path / "scan", target="t", resize=(16, 20), progress=False)
    shapes: list[tuple[int, ...]] = []

    def compute(images: np.ndarray) -> dict[str, np.ndarray]:
        shapes.append(images.shape[1:])
        return {"h__t": np.full(len(images), images.shape[1], np.float32)}

    add_columns(out, pool, "size", compute, progress=False)
    assert set(shapes) == {(16, 20, 3)}
    assert (read_score_table(out)["h__t"] == 16).all()
