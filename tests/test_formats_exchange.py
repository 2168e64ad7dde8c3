"""Label Studio task URLs it can serve, tasks made in Label Studio, JSON_MIN and unknown export
shapes; CVAT project labels that are not classes and colourless labelmaps (no tool needed)."""
from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from PIL import Image

from blindspots.data.classes import Classes, voc_palette
from blindspots.data.formats import export_cvat, export_labelstudio, import_cvat, import_labelstudio
from blindspots.data.formats.labelstudio import brush_results, image_path_of, task_image_url

CLASSES = Classes(("sky", "road", "car"))


def test_task_image_urls(tmp_path, monkeypatch):
    monkeypatch.delenv("LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT", raising=False)
    pool = tmp_path / "home" / "photos"
    assert task_image_url("a b.jpg", image_root=pool) == "/data/local-files/?d=photos/a%20b.jpg"
    assert task_image_url("x/c.jpg", image_root=pool, document_root=tmp_path) == \
        "/data/local-files/?d=home/photos/x/c.jpg"
    monkeypatch.setenv("LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT", str(tmp_path))
    assert task_image_url("c.jpg", image_root=pool) == "/data/local-files/?d=home/photos/c.jpg"
    with pytest.raises(ValueError, match="image_root: expected a strict subfolder"):
        task_image_url("c.jpg", image_root=tmp_path)  # the storage may not be the document root itself
    with pytest.raises(ValueError, match="image_root: expected a strict subfolder"):
        task_image_url("c.jpg", image_root="/elsewhere", document_root=tmp_path)
    assert task_image_url("x/c d.jpg", image_url="http://h:8081/imgs/") == "http://h:8081/imgs/x/c%20d.jpg"
    assert task_image_url("c.jpg", image_url="s3://bucket/{id}") == "s3://bucket/c.jpg"
    assert task_image_url("c.jpg") == "/data/local-files/?d=c.jpg"  # the old default
    with pytest.raises(ValueError, match="image_url"):
        task_image_url("c.jpg", image_url="photos/")
    path = export_labelstudio(tmp_path / "t.json", {"x/c.jpg": np.zeros((4, 4), np.uint8)}, CLASSES,
                              image_root=pool, document_root=tmp_path)
    assert json.loads(path.read_text())[0]["data"]["image"] == "/data/local-files/?d=home/photos/x/c.jpg"


def test_image_path_of_urls():
    assert image_path_of("/data/local-files/?d=photos/x/a%20b.jpg") == "photos/x/a b.jpg"
    assert image_path_of("/data/upload/12/0a1b2c3d-cat.jpg") == "/data/upload/12/cat.jpg"
    assert image_path_of("https://h/p/0a1b2c3d-cat.jpg") == "/p/0a1b2c3d-cat.jpg"  # only uploads are renamed
    assert image_path_of("s3://bucket/x/cat.jpg") == "/x/cat.jpg"


def _task(image: str, mask: np.ndarray, **data) -> dict:
    return {"data": {"image": image, **data}, "annotations": [{"result": brush_results(mask, CLASSES)}]}


def test_match_by_path_then_name_and_ambiguity():
    m = np.array([[0, 1], [2, 255]], np.uint8)
    ids = ["a/cat.jpg", "b/cat.jpg", "dog.png"]
    got = import_labelstudio([_task("/data/local-files/?d=pool/b/cat.jpg", m),
                              _task("/data/upload/1/0a1b2c3d-dog.png", m)], CLASSES, ids=ids)
    assert sorted(got) == ["b/cat.jpg", "dog.png"]
    with pytest.raises(ValueError, match="several"):
        import_labelstudio([_task("/data/upload/1/0a1b2c3d-cat.jpg", m)], CLASSES, ids=ids)
    # blindspots_id wins over the URL; without ids the URL is the key (as before)
    assert list(import_labelstudio([_task("http://x/whatever.jpg", m, blindspots_id="dog.png")], CLASSES,
                                   ids=ids)) == ["dog.png"]
    assert list(import_labelstudio([_task("http://x/y.jpg", m)], CLASSES)) == ["http://x/y.jpg"]


def test_json_min_records_and_unknown_shapes():
    m = np.array([[0, 1, 1], [2, 2, 255]], np.uint8)
    res = brush_results(m, CLASSES)
    values = [dict(r["value"], original_width=3, original_height=2) for r in res]
    old = np.zeros_like(m)
    old_values = [dict(r["value"], original_width=3, original_height=2) for r in brush_results(old, CLASSES)]
    records = [{"image": "/data/upload/1/0a1b2c3d-a.jpg", "id": 7, "tag": old_values, "annotator": 1,
                "annotation_id": 1, "created_at": "2026-01-01", "updated_at": "2026-01-01", "lead_time": 1},
               {"image": "/data/upload/1/0a1b2c3d-a.jpg", "id": 7, "tag": values, "annotator": 2,
                "annotation_id": 2, "created_at": "2026-01-02", "updated_at": "2026-01-02", "lead_time": 1},
               {"image": "/data/upload/1/0a1b2c3d-b.jpg", "id": 8, "annotator": 1}]  # not annotated
    got = import_labelstudio(records, CLASSES, ids=["a.jpg", "b.jpg"])
    assert list(got) == ["a.jpg"]
    np.testing.assert_array_equal(got["a.jpg"], m)  # the latest annotation of task 7
    with pytest.raises(ValueError, match="COCO"):
        import_labelstudio({"images": [], "annotations": [], "categories": []}, CLASSES)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"task 0: expected a Label Studio JSON task .* or a JSON_MIN record"):
        import_labelstudio([{"rows": [1, 2]}], CLASSES)


def _zip(path, labelmap: str, masks: dict[str, np.ndarray]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("labelmap.txt", labelmap)
        for name, rgb in masks.items():
            buf = io.BytesIO()
            Image.fromarray(rgb).save(buf, format="PNG")
            zf.writestr(f"SegmentationClass/{name}.png", buf.getvalue())


def test_cvat_unused_project_labels_warn_used_ones_fail(tmp_path, caplog):
    pal = voc_palette(8)
    rgb = np.zeros((4, 4, 3), np.uint8)
    rgb[:2] = pal[1]  # sky
    rgb[2:, :2] = pal[3]  # car
    labelmap = "".join(f"{n}:::\n" for n in ["background", "sky", "tree", "car"])  # no colours: VOC by order
    _zip(tmp_path / "a.zip", labelmap, {"a": rgb})
    with caplog.at_level("WARNING"):
        got = import_cvat(tmp_path / "a.zip", CLASSES)["a"]
    assert "tree" in caplog.text
    np.testing.assert_array_equal(got, [[0] * 4, [0] * 4, [2, 2, 255, 255], [2, 2, 255, 255]])
    rgb[0, 0] = pal[2]  # a pixel labelled tree
    _zip(tmp_path / "b.zip", labelmap, {"a": rgb})
    with pytest.raises(ValueError, match=r"pixels labelled \['tree'\]"):
        import_cvat(tmp_path / "b.zip", CLASSES)
    _zip(tmp_path / "c.zip", "sky:1,2,3::\nroad:1,2,3::\n", {"a": rgb})
    with pytest.raises(ValueError, match="one colour per label"):
        import_cvat(tmp_path / "c.zip", CLASSES)
    # our own export still round-trips
    m = np.array([[0, 1], [2, 255]], np.uint8)
    np.testing.assert_array_equal(import_cvat(export_cvat(tmp_path / "o.zip", {"x.jpg": m}, CLASSES), CLASSES)["x"], m)
