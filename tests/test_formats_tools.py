"""The annotation tools' own code reads what we write and we read what it writes.

Label Studio: `label_studio_converter` (its brush RLE, its image -> annotation import, its JSON_MIN and
brush-to-numpy exports). CVAT: datumaro's `voc_segmentation` import/export (CVAT's dataset library).
Each is skipped with the reason when the package cannot be imported here (datumaro pins pandas~=2.3,
pillow~=12.0 and pyarrow~=25.0, so it is not in the dev extras; docs/annotation_tools.md says how to run these).
"""
from __future__ import annotations

import json
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from blindspots.data.classes import Classes
from blindspots.data.formats import export_cvat, export_labelstudio, import_cvat, import_labelstudio, labeling_config
from blindspots.data.formats.labelstudio import decode_rle, encode_rle

CLASSES = Classes(("sky", "road", "building", "car"))
IDS = ["street/a.jpg", "b.png", "c.jpeg"]


def _masks(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for i, image_id in enumerate(IDS):
        h, w = (24, 32) if i != 1 else (20, 16)  # mixed sizes
        m = np.zeros((h, w), np.uint8)
        m[h // 2:] = 1
        m[2:8, 3:9] = 2
        m[rng.random((h, w)) < 0.05] = 3
        m[0, :5] = 255
        out[image_id] = m
    return out


def _as_annotations(tasks: list[dict]) -> list[dict]:
    """What an annotator who accepts the pre-annotation leaves: predictions become annotations."""
    for n, t in enumerate(tasks):
        t["id"] = n + 1
        t["annotations"] = [{"id": 100 + n, "result": t.pop("predictions")[0]["result"], "was_cancelled": False,
                             "created_at": "2026-01-01T00:00:00", "updated_at": "2026-01-01T00:00:00",
                             "lead_time": 1.0, "completed_by": 1}]
    return tasks


# --- Label Studio -------------------------------------------------------------------------------

def test_labelstudio_rle_against_converter():
    brush = pytest.importorskip("label_studio_converter.brush")
    rng = np.random.default_rng(0)
    for _ in range(5):
        flat = np.repeat((rng.random(300) < 0.3).astype(np.uint8) * 255, 4)
        flat[:40] = 255
        np.testing.assert_array_equal(np.asarray(brush.decode_rle(encode_rle(flat)), np.uint8), flat)
        np.testing.assert_array_equal(decode_rle(brush.encode_rle(flat)), flat)


def test_labelstudio_converter_reads_our_export(tmp_path):
    """Our tasks -> the converter's BRUSH_TO_NUMPY layers and JSON_MIN; both match, JSON_MIN reads back."""
    pytest.importorskip("label_studio_converter")
    from label_studio_converter import Converter

    masks = _masks()
    path = export_labelstudio(tmp_path / "tasks.json", masks, CLASSES, image_url="http://host/{id}")
    tasks = _as_annotations(json.loads(path.read_text()))
    (tmp_path / "export.json").write_text(json.dumps(tasks))
    conv = Converter(labeling_config(CLASSES), project_dir=str(tmp_path), download_resources=False)
    (tmp_path / "npy").mkdir()
    conv.convert(str(tmp_path / "export.json"), str(tmp_path / "npy"), "BRUSH_TO_NUMPY", is_dir=False)
    for n, image_id in enumerate(IDS):
        m = masks[image_id]
        for k, name in enumerate(CLASSES.names):
            files = list((tmp_path / "npy").glob(f"task-{n + 1}-annotation-*-tag-{name}-0.npy"))
            assert len(files) == int((m == k).any())
            if files:
                np.testing.assert_array_equal(np.load(files[0]) > 0, m == k)
    conv.convert(str(tmp_path / "export.json"), str(tmp_path / "min"), "JSON_MIN", is_dir=False)
    records = json.loads((tmp_path / "min" / "result.json").read_text())
    back = import_labelstudio(records, CLASSES)
    assert set(back) == set(IDS)
    for image_id in IDS:
        np.testing.assert_array_equal(back[image_id], masks[image_id])


def test_labelstudio_tasks_made_in_label_studio_match_by_file_name(tmp_path):
    """Tasks created in Label Studio (no blindspots_id; uploaded or local-files URLs), annotated with the
    converter's own image -> brush encoder, are matched to our ids by the image's path or name."""
    brush = pytest.importorskip("label_studio_converter.brush")
    masks = _masks(1)
    urls = {"street/a.jpg": "/data/local-files/?d=photos/street/a.jpg", "b.png": "/data/upload/3/1a2b3c4d-b.png",
            "c.jpeg": "http://host:8081/c.jpeg"}
    tasks = []
    for n, image_id in enumerate(IDS):
        result = []
        for k, name in enumerate(CLASSES.names):
            if not (masks[image_id] == k).any():
                continue
            png = tmp_path / f"{n}-{k}.png"
            Image.fromarray(((masks[image_id] == k) * 255).astype(np.uint8)).save(png)
            result += brush.image2annotation(str(png), name, "tag", "image")["result"]
        tasks.append({"id": n, "data": {"image": urls[image_id]},
                      "annotations": [{"id": n, "result": result, "created_at": "2026-01-01"}]})
    tasks.append({"id": 9, "data": {"image": "/data/upload/3/deadbeef-other.png"},
                  "annotations": [{"id": 9, "result": result}]})
    back = import_labelstudio(tasks, CLASSES, ids=IDS)
    assert set(back) == set(IDS)  # the unknown task is skipped with a warning
    for image_id in IDS:
        np.testing.assert_array_equal(back[image_id], masks[image_id])


# --- CVAT via datumaro ----------------------------------------------------------------------------

def _datumaro():
    # scripts/test.sh installs datumaro with --no-deps into .venv/datumaro (its pins would downgrade
    # pandas/Pillow/pyarrow); appended, so the venv's own packages still win.
    extra = Path(__file__).resolve().parents[1] / ".venv" / "datumaro"
    if extra.is_dir() and str(extra) not in sys.path:
        sys.path.append(str(extra))
    return pytest.importorskip("datumaro", reason="datumaro not importable here (it pins pandas~=2.3, pillow~=12.0, "
                               "pyarrow~=25.0; install it in a separate --target, see docs/annotation_tools.md)")


def test_datumaro_reads_our_cvat_zip_and_we_read_its_export(tmp_path):
    dm = _datumaro()
    from datumaro.components.annotation import AnnotationType

    masks = _masks(2)
    images = {i: np.zeros(m.shape + (3,), np.uint8) for i, m in masks.items()}
    z = export_cvat(tmp_path / "s.zip", masks, CLASSES, images=images)
    with zipfile.ZipFile(z) as zf:
        zf.extractall(tmp_path / "ours")
    ds = dm.Dataset.import_from(str(tmp_path / "ours"), "voc_segmentation")
    labels = ds.categories()[AnnotationType.label]
    assert len(ds) == len(IDS)
    for item in ds:
        image_id = next(i for i in IDS if i.rsplit(".", 1)[0] == item.id)
        m = masks[image_id]
        union: dict[str, np.ndarray] = {}  # datumaro gives one mask per object (SegmentationObject)
        for ann in item.annotations:
            if ann.type == AnnotationType.mask:
                name = labels[ann.label].name
                union[name] = union.get(name, np.zeros(m.shape, bool)) | ann.image.astype(bool)
        assert set(union) == {CLASSES.names[k] for k in np.unique(m) if k < len(CLASSES)}
        for name, got in union.items():
            np.testing.assert_array_equal(got, m == CLASSES.index(name))
    ds.export(str(tmp_path / "theirs"), "voc_segmentation", save_media=False)
    back = import_cvat(tmp_path / "theirs", CLASSES, ids=IDS)
    for image_id in IDS:
        np.testing.assert_array_equal(back[image_id], masks[image_id])


def test_datumaro_colourless_labelmap_and_unused_project_labels(tmp_path, caplog):
    """A project labelmap with no colours (datumaro paints VOC colours by label order) and labels no pixel
    uses ('tree', 'person' are not classes): read with a warning, pixel-exact."""
    dm = _datumaro()
    from datumaro.components.annotation import LabelCategories, Mask
    from datumaro.components.dataset_base import DatasetItem
    from datumaro.components.media import Image as DmImage

    names = ["background", "sky", "tree", "road", "building", "car", "person"]
    masks = _masks(3)
    items = []
    for image_id, m in masks.items():
        anns = [Mask(image=(m == CLASSES.index(n)), label=names.index(n)) for n in CLASSES.names
                if (m == CLASSES.index(n)).any()]
        items.append(DatasetItem(id=image_id.rsplit(".", 1)[0], media=DmImage.from_numpy(np.zeros(m.shape + (3,))),
                                 annotations=anns))
    ds = dm.Dataset.from_iterable(items, categories={dm.AnnotationType.label: LabelCategories.from_iterable(names)})
    ds.export(str(tmp_path / "theirs"), "voc_segmentation", save_media=False, label_map="source")
    lm = tmp_path / "theirs" / "labelmap.txt"
    lm.write_text("".join(f"{n}:::\n" for n in names))  # the colourless labelmap
    with caplog.at_level("WARNING"):
        back = import_cvat(tmp_path / "theirs", CLASSES, ids=IDS)
    assert "tree" in caplog.text and "person" in caplog.text
    for image_id in IDS:
        expect = masks[image_id].copy()
        expect[expect == 255] = 255  # background/unpainted -> ignore
        np.testing.assert_array_equal(back[image_id], expect)
