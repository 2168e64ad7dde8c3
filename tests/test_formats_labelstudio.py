"""Label Studio brush RLE and task export / import."""
from __future__ import annotations

import json

import numpy as np
from PIL import Image
import pytest
from hypothesis import given, settings, strategies as st

from blindspots.data.classes import Classes
from blindspots.data.formats.labelstudio import (
    decode_rle, encode_rle, export_labelstudio, import_labelstudio, labeling_config, mask_to_rle, rle_to_mask,
)

CLASSES = Classes(("sky", "road", "building", "car"))


# --- oracle: a literal port of label_studio_converter.brush (encode_rle / decode_rle) --------
def ls_encode(arr: np.ndarray) -> list[int]:
    num = len(arr)
    s = f"{num:032b}" + f"{8 - 1:05b}" + "".join(f"{x - 1:04b}" for x in [3, 4, 8, 16])
    y = arr[1:] != arr[:-1]
    i = np.append(np.where(y), num - 1)
    z = np.diff(np.append(-1, i))
    out = ""
    for length, value in zip(z, arr[i]):
        if length == 1:
            out += "0" + "00" + "000" + f"{value:08b}"
        elif length <= 8:
            out += "1" + "00" + f"{length - 1:03b}" + f"{value:08b}"
        elif length <= 16:
            out += "1" + "01" + f"{length - 1:04b}" + f"{value:08b}"
        elif length <= 256:
            out += "1" + "10" + f"{length - 1:08b}" + f"{value:08b}"
        else:
            t = length
            while t > 2**16:
                out += "1" + "11" + f"{2 ** 16 - 1:016b}" + f"{value:08b}"
                t -= 2**16
            out += "1" + "11" + f"{t - 1:016b}" + f"{value:08b}"
    total = s + out
    total += (8 - len(total) % 8) * "0"
    return [int(total[k:k + 8], 2) for k in range(0, len(total), 8)]


def ls_decode(rle: list[int]) -> np.ndarray:
    bits = "".join(f"{b:08b}" for b in rle)
    pos = 0

    def read(n: int) -> int:
        nonlocal pos
        v = int(bits[pos:pos + n], 2)
        pos += n
        return v

    num = read(32)
    word = read(5) + 1
    sizes = [read(4) + 1 for _ in range(4)]
    out = np.zeros(num, np.uint8)
    i = 0
    while i < num:
        x = read(1)
        j = i + 1 + read(sizes[read(2)])
        if x:
            out[i:j] = read(word)
            i = j
        else:
            while i < j:
                out[i] = read(word)
                i += 1
    return out


def brush(seed: int, h: int = 40, w: int = 56) -> np.ndarray:
    rng = np.random.default_rng(seed)
    m = np.zeros((h, w), bool)
    y, x = rng.integers(0, h - 8), rng.integers(0, w - 8)
    m[y:y + 8, x:x + rng.integers(2, 8)] = True
    m[rng.random((h, w)) < 0.02] = True  # stray pixels make literal runs
    return m


@pytest.mark.parametrize("seed", range(4))
def test_rle_compatible_with_label_studio(seed: int) -> None:
    flat = np.repeat(brush(seed).astype(np.uint8) * 255, 4)
    ours = encode_rle(flat)
    np.testing.assert_array_equal(ls_decode(ours), flat)  # Label Studio reads what we write
    np.testing.assert_array_equal(decode_rle(ls_encode(flat)), flat)  # we read what it writes


def test_long_runs_and_literals() -> None:
    flat = np.concatenate([np.full(70_000, 255, np.uint8), np.arange(300) % 256, np.zeros(17, np.uint8)]).astype(np.uint8)
    np.testing.assert_array_equal(decode_rle(encode_rle(flat)), flat)
    np.testing.assert_array_equal(ls_decode(encode_rle(flat)), flat)
    np.testing.assert_array_equal(decode_rle(ls_encode(flat)), flat)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.sampled_from([0, 0, 0, 255, 255, 7]), min_size=1, max_size=600))
def test_rle_round_trip_any(values: list[int]) -> None:
    arr = np.asarray(values, np.uint8)
    np.testing.assert_array_equal(decode_rle(encode_rle(arr)), arr)
    np.testing.assert_array_equal(ls_decode(encode_rle(arr)), arr)


def test_mask_rle() -> None:
    m = brush(5)
    np.testing.assert_array_equal(rle_to_mask(mask_to_rle(m), *m.shape), m)
    with pytest.raises(ValueError, match="rle"):
        rle_to_mask(mask_to_rle(m), 10, 10)
    with pytest.raises(ValueError, match="rle"):
        decode_rle(mask_to_rle(m)[:10])


def sample_masks() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    out = {}
    for i in range(3):
        m = np.zeros((32, 48), np.uint8)
        m[8:20, 5:30] = 1 + i % 3
        m[rng.random((32, 48)) < 0.05] = 3
        m[:2] = 255
        out[f"dir/img_{i}.png"] = m
    return out


def test_export_import_round_trip(tmp_path) -> None:
    ms = sample_masks()
    p = export_labelstudio(tmp_path / "tasks.json", ms, CLASSES, image_url="http://x/{id}")
    tasks = json.loads(p.read_text())
    assert len(tasks) == 3 and tasks[0]["data"]["image"] == "http://x/dir/img_0.png"
    res = tasks[0]["predictions"][0]["result"]
    assert {r["value"]["brushlabels"][0] for r in res} == {CLASSES.names[k] for k in np.unique(ms["dir/img_0.png"]) if k < 4}
    assert all(r["type"] == "brushlabels" and r["value"]["format"] == "rle" for r in res)
    # an annotator accepts the pre-annotation: Label Studio copies predictions into annotations
    for t in tasks:
        t["annotations"] = [{"id": 1, "result": t["predictions"][0]["result"], "was_cancelled": False,
                             "updated_at": "2026-01-01T00:00:00Z"}]
    back = import_labelstudio(tasks, CLASSES)
    for k, m in ms.items():
        np.testing.assert_array_equal(back[k], m)


def test_import_latest_annotation_and_skips(tmp_path) -> None:
    m = np.zeros((8, 8), np.uint8)
    m[2:6, 2:6] = 3
    r_old = {"type": "brushlabels", "original_width": 8, "original_height": 8,
             "value": {"format": "rle", "rle": mask_to_rle(np.ones((8, 8))), "brushlabels": ["road"]}}
    r_new = {"type": "brushlabels", "original_width": 8, "original_height": 8,
             "value": {"format": "rle", "rle": mask_to_rle(m == 3), "brushlabels": ["car"]}}
    tasks = [{"data": {"image": "/img/a.png"}, "annotations": [
        {"result": [r_old], "updated_at": "2026-01-01"},
        {"result": [r_new], "updated_at": "2026-02-01"},
        {"result": [r_old], "updated_at": "2026-03-01", "was_cancelled": True}]},
        {"data": {"image": "/img/b.png"}, "annotations": []}]
    path = tmp_path / "export.json"
    path.write_text(json.dumps(tasks))
    out = import_labelstudio(path, CLASSES, fill_value=0)
    assert set(out) == {"/img/a.png"}
    np.testing.assert_array_equal(out["/img/a.png"], m)
    assert (import_labelstudio(tasks, CLASSES)["/img/a.png"][0, 0]) == 255  # unpainted -> ignore
    r_new["value"]["brushlabels"] = ["tree"]
    with pytest.raises(ValueError, match="name"):
        import_labelstudio(tasks, CLASSES)
    with pytest.raises(ValueError, match="source"):
        import_labelstudio({"not": "a list"}, CLASSES)  # type: ignore[arg-type]


def test_labeling_config() -> None:
    xml = labeling_config(CLASSES)
    assert '<BrushLabels name="tag" toName="image">' in xml and '<Label value="car"' in xml
    from xml.etree import ElementTree

    root = ElementTree.fromstring(labeling_config(CLASSES))
    for tool in ("BrushLabels", "PolygonLabels"):  # both tools, one label per class
        assert [e.get("value") for e in root.find(tool).iter("Label")] == list(CLASSES.names)


def test_labelled_set_ids_without_extension_export_and_import(tmp_path) -> None:
    """A labelled set's ids have no extension (`cat` for images/cat.jpg): the exported URL used to point
    at `images/cat` (no such file), and tasks made in Label Studio from `cat.jpg` matched no id."""
    root = tmp_path / "pool" / "images"
    root.mkdir(parents=True)
    m = np.zeros((6, 8), np.uint8)
    m[2:4, 2:6] = 1
    for name in ("cat.jpg", "dog.png"):
        Image.fromarray(np.zeros((6, 8, 3), np.uint8)).save(root / name)
    p = export_labelstudio(tmp_path / "t.json", {"cat": m, "dog": m}, CLASSES, image_root=root,
                           document_root=tmp_path)
    tasks = json.loads(p.read_text())
    assert [t["data"]["image"] for t in tasks] == ["/data/local-files/?d=pool/images/cat.jpg",
                                                   "/data/local-files/?d=pool/images/dog.png"]
    for t in tasks:  # tasks as Label Studio exports them when created there (no blindspots_id)
        t["data"].pop("blindspots_id")
        t["annotations"] = [{"id": 1, "result": t["predictions"][0]["result"], "was_cancelled": False}]
    tasks[1]["data"]["image"] = "/data/upload/1/0a1b2c3d-dog.png"
    back = import_labelstudio(tasks, CLASSES, ids=["cat", "dog"])
    assert sorted(back) == ["cat", "dog"]
    np.testing.assert_array_equal(back["cat"], m)
    (root / "cat.png").write_bytes((root / "dog.png").read_bytes())
    with pytest.raises(ValueError, match=r"image_root: expected one image file for id 'cat'.*got 2"):
        export_labelstudio(tmp_path / "t2.json", {"cat": m}, CLASSES, image_root=root, document_root=tmp_path)
