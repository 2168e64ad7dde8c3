"""Real pools never stop the scan: model errors and refused links become error rows; mixed sizes;
content hashes; maps named by the ids rule (old names still read); each model's class names."""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from blindspots.data.classes import Classes
from blindspots.data import ImagePool
from blindspots.models.adapters import CallableSegmenter
from blindspots.scan import find_map, read_score_table, scan_pool
from blindspots.scan.layout import ScanLayout

C = 3


def labels_by_red(b: np.ndarray) -> np.ndarray:
    """A plain model: class = red channel // 86 (int [N, H, W])."""
    return b[..., 0].astype(np.int64) * C // 256


def by_green(b: np.ndarray) -> np.ndarray:
    return b[..., 1].astype(np.int64) * C // 256


def model(fn) -> CallableSegmenter:
    return CallableSegmenter(fn, C, output="labels")


def write_pool(root: Path, sizes: list[tuple[int, int]], seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    ids = []
    for i, (h, w) in enumerate(sizes):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        img[0, 0] = (0, 0, 0)
        name = f"im_{i:02d}.jpg" if i % 2 else f"im_{i:02d}.png"
        Image.fromarray(img).save(root / name, quality=95)
        ids.append(name)
    return ids


def mark(path: Path) -> None:
    """Set pixel (0, 0) to pure white: the flaky model below refuses such images."""
    img = np.asarray(Image.open(path).convert("RGB")).copy()
    img[0, 0] = 255
    Image.fromarray(img).save(path)


def refuses_marked(b: np.ndarray) -> np.ndarray:
    if (b[:, 0, 0] == 255).all(axis=-1).any():
        raise RuntimeError("cannot segment an image with a white corner")
    return labels_by_red(b)


def test_model_failing_on_some_images_gives_error_rows(tmp_path):
    root = tmp_path / "pool"
    write_pool(root, [(32, 40)] * 10)
    bad = {"im_02.png", "im_08.png"}  # in two batches of 4: each batch is retried image by image
    for name in bad:
        mark(root / name)
    pool = ImagePool(root)
    out = scan_pool(pool, {"t": model(refuses_marked), "g": model(by_green)}, tmp_path / "scan", target="t",
                    batch_size=4, shard_size=4, progress=False)
    df = read_score_table(out).set_index("id")
    assert set(df.index[df.status == "error"]) == bad
    for name in bad:
        err = df.loc[name, "error"]  # the model's name, then the failure (ModelFailure names the input shape)
        assert err.startswith("t: ") and "RuntimeError: cannot segment an image with a white corner" in err
        assert np.isnan(df.loc[name, "entropy__t"]) and np.isnan(df.loc[name, "dpa__t__g"])
        assert ScanLayout(out).find_map("t", name) is None and ScanLayout(out).find_map("g", name) is not None
    ok = df[df.status == "ok"]
    assert len(ok) == 8 and ok["error"].isna().all() and np.isfinite(ok["dpa__t__g"]).all()
    # the table of the good images equals a scan of a pool without the bad ones
    for name in bad:
        (root / name).unlink()
    ref = read_score_table(scan_pool(ImagePool(root), {"t": model(labels_by_red), "g": model(by_green)},
                                     tmp_path / "ref", target="t", batch_size=4, shard_size=4, progress=False))
    cols = ["dpa__t__g", "dmiou__t__g", "entropy__t", "frac__t__1", "frac__g__2"]
    np.testing.assert_allclose(ok[cols].to_numpy(float), ref.set_index("id").loc[ok.index, cols].to_numpy(float))


def test_new_target_errors_are_its_own(tmp_path):
    root = tmp_path / "pool"
    write_pool(root, [(24, 24)] * 6)
    mark(root / "im_04.png")
    pool = ImagePool(root)
    out = scan_pool(pool, {"t": model(labels_by_red), "g": model(by_green)}, tmp_path / "scan", target="t",
                    shard_size=4, progress=False)
    scan_pool(pool, {"t2": model(refuses_marked)}, out, target="t2", competitors=["g"], shard_size=4,
              progress=False)
    new = read_score_table(out).set_index("id")
    assert new.loc["im_04.png", "status"] == "error" and new.loc["im_04.png", "error"].startswith("t2: ") and "RuntimeError" in new.loc["im_04.png", "error"]
    assert (new.drop(index="im_04.png").status == "ok").all()
    old = read_score_table(out, target="t").set_index("id")
    assert (old.status == "ok").all()


def test_model_failing_everywhere_stops_with_one_clear_error(tmp_path):
    root = tmp_path / "pool"
    write_pool(root, [(16, 16)] * 20)

    def broken(b):
        raise RuntimeError("onnxruntime: Invalid input shape\nat node Conv_0")
    out = tmp_path / "scan"
    with pytest.raises(ValueError) as err:
        scan_pool(ImagePool(root), {"t": model(labels_by_red), "bad_model": model(broken)}, out, target="t",
                  batch_size=4, shard_size=4, progress=False)
    msg = str(err.value)
    assert "\n" not in msg and "'bad_model'" in msg and "failed on every image" in msg
    assert "Invalid input shape at node Conv_0" in msg
    # nothing with its failures was written: a fixed model under that name scans everything
    assert not (out / "models" / "bad_model").exists()
    scan_pool(ImagePool(root), {"t": model(labels_by_red), "bad_model": model(by_green)}, out, target="t",
              batch_size=4, shard_size=4, progress=False)
    assert (read_score_table(out).status == "ok").all()


@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_symlinks_leaving_the_pool_and_dangling_links_get_error_rows(tmp_path):
    root = tmp_path / "pool"
    write_pool(root, [(16, 16)] * 3)
    outside = tmp_path / "elsewhere" / "o.png"
    outside.parent.mkdir()
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(outside)
    (root / "link_out.png").symlink_to(outside)
    (root / "dangling_in.png").symlink_to(root / "gone.png")
    (root / "dangling_out.png").symlink_to(tmp_path / "elsewhere" / "gone.png")
    pool = ImagePool(root)
    out = scan_pool(pool, {"t": model(labels_by_red)}, tmp_path / "scan", target="t", progress=False)
    df = read_score_table(out).set_index("id")
    assert len(df) == 6
    assert df.loc["link_out.png", "status"] == "error" and "outside the pool" in df.loc["link_out.png", "error"]
    assert "dangling" in df.loc["dangling_out.png", "error"]
    assert df.loc["dangling_in.png", "status"] == "error" and "dangling symlink" in df.loc["dangling_in.png", "error"]
    assert (df.drop(index=["link_out.png", "dangling_in.png", "dangling_out.png"]).status == "ok").all()


def test_mixed_sizes_hashes_maps_and_manifest(tmp_path):
    root = tmp_path / "pool"
    sizes = [(1110, 1282), (200, 300), (37, 53), (200, 300), (64, 64)]
    ids = write_pool(root, sizes)
    shutil.copy(root / ids[1], root / "copy_of_1.jpg")  # an exact duplicate
    classes = Classes(("background", "person", "car"))
    t = model(labels_by_red)
    t.classes = classes  # the models helper gives adapters `.classes`; the scan reads it
    out = scan_pool(ImagePool(root), {"t": t, "g": model(by_green)}, tmp_path / "scan", target="t",
                    batch_size=2, shard_size=3, progress=False)
    df = read_score_table(out).set_index("id")
    assert (df.status == "ok").all()
    for image_id, (h, w) in zip(ids, sizes):
        assert (df.loc[image_id, "height"], df.loc[image_id, "width"]) == (h, w)
        path = find_map(out, "t", image_id)
        assert path == out / "maps" / "t" / (Path(image_id).stem + ".png")  # the ids rule: extension replaced
        assert np.asarray(Image.open(path)).shape == (h, w)
    assert df.loc["copy_of_1.jpg", "content_hash"] == df.loc[ids[1], "content_hash"]
    assert df["content_hash"].nunique() == len(ids)
    man = json.loads((out / "scan.json").read_text())
    assert man["models"]["t"]["classes"] == ["background", "person", "car"]
    assert man["models"]["g"]["classes"] == ["class_0", "class_1", "class_2"]


def test_old_style_maps_are_still_found(tmp_path):
    root = tmp_path / "pool"
    ids = write_pool(root, [(16, 16)] * 4)
    pool = ImagePool(root)
    out = scan_pool(pool, {"t": model(labels_by_red), "g": model(by_green)}, tmp_path / "scan", target="t",
                    shard_size=2, progress=False)
    layout = ScanLayout(out)
    for m in ("t", "g"):  # rename every map to the legacy "<id>.png"
        for i in ids:
            layout.map_path(m, i).rename(layout.maps_dir(m) / (i + ".png"))
    assert find_map(out, "t", ids[1]) == layout.maps_dir("t") / (ids[1] + ".png")
    # a new target computes its pairs against the competitor's legacy-named maps
    scan_pool(pool, {"t2": model(labels_by_red)}, out, target="t2", competitors=["g"], shard_size=2, progress=False)
    new, old = read_score_table(out), read_score_table(out, target="t")
    np.testing.assert_allclose(new["dpa__t2__g"], old["dpa__t__g"])


def test_scan_refuses_ids_sharing_a_map_name(tmp_path):
    root = tmp_path / "pool"
    root.mkdir()
    for name in ("cat.jpg", "cat.png"):
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(root / name)
    with pytest.raises(ValueError, match="cat.jpg, cat.png"):
        scan_pool(ImagePool(root), {"t": model(labels_by_red)}, tmp_path / "scan", target="t", progress=False)
    out = scan_pool(ImagePool(root), {"t": model(labels_by_red)}, tmp_path / "nomaps", target="t", save_maps=False,
                    progress=False)
    assert len(read_score_table(out)) == 2
