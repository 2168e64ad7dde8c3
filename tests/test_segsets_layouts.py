"""Label layouts as presets: index, VOC, Cityscapes, ADE20K, a classes file, scan maps as masks,
symlinked masks. Every sample dataset is built here with tiny images."""
from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.data.classfile import read_classes
from blindspots.data.classes import voc_palette
from blindspots.data.layouts import ADE20K_CLASSES, CITYSCAPES_CLASSES, CITYSCAPES_ID_TO_TRAINID, VOC_CLASSES
from blindspots.data.segsets import open_segset
from blindspots.ids import artifact_name, legacy_artifact_name

H, W = 8, 12


def _image(path, seed=0, size=(H, W)):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.random.default_rng(seed).integers(0, 256, size + (3,), dtype=np.uint8)).save(path)


def _mask(path, values, mode="L"):
    path.parent.mkdir(parents=True, exist_ok=True)
    img = Image.fromarray(np.asarray(values, np.uint8))
    if mode == "P":
        img = Image.frombytes("P", img.size, img.tobytes())
        img.putpalette(voc_palette(256).ravel().tolist())
    img.save(path)


def _voc(root):
    """VOC2012 with 4 images, 3 of them segmented; train = first two, val = the third."""
    voc = root / "VOCdevkit" / "VOC2012"
    rng = np.random.default_rng(0)
    for i, name in enumerate(["2007_000032", "2007_000039", "2008_000001", "2009_000002"]):
        _image(voc / "JPEGImages" / f"{name}.jpg", i)
        if i < 3:
            m = rng.integers(0, 21, (H, W))
            m[0] = 255
            _mask(voc / "SegmentationClass" / f"{name}.png", m, "P")
    sets = voc / "ImageSets" / "Segmentation"
    sets.mkdir(parents=True)
    (sets / "train.txt").write_text("2007_000032\n2007_000039\n")
    (sets / "val.txt").write_text("2008_000001\n")
    return voc


def test_voc_layout_split_names_and_ids(tmp_path):
    voc = _voc(tmp_path)
    everything = open_segset(tmp_path / "VOCdevkit", layout="voc")  # images without masks are left out
    assert everything.ids == ["2007_000032", "2007_000039", "2008_000001"]
    assert everything.classes == VOC_CLASSES
    val = open_segset(voc, layout="voc", ids="val")
    assert val.ids == ["2008_000001"]
    image, mask = val[0]
    assert image.shape == (H, W, 3) and mask.shape == (H, W) and (mask[0] == 255).all()
    assert open_segset(voc, layout="voc", split="train").ids == ["2007_000032", "2007_000039"]
    assert open_segset(voc, layout="voc", ids=["2007_000039.jpg"]).ids == ["2007_000039"]  # an id with extension
    with pytest.raises(ValueError, match=r"ids: .*2009_000002.*layout 'voc'"):
        open_segset(voc, layout="voc", ids=["2009_000002"])


def _cityscapes(root, train_ids: bool):
    """leftImg8bit/val/<city>/..._leftImg8bit.png with gtFine labelIds (or labelTrainIds) masks."""
    label_ids = np.array([[7, 8, 26, 24], [0, 1, 33, 23]], np.uint8).repeat(4, 0).repeat(3, 1)  # [8, 12]
    for city, n in (("frankfurt", 2), ("lindau", 1)):
        for j in range(n):
            stem = f"{city}_000000_{j:06d}"
            _image(root / "leftImg8bit" / "val" / city / f"{stem}_leftImg8bit.png", j)
            gt = root / "gtFine" / "val" / city
            _mask(gt / f"{stem}_gtFine_labelIds.png", label_ids)
            _mask(gt / f"{stem}_gtFine_color.png", np.zeros((H, W)))  # other gtFine files are not masks
            if train_ids:
                _mask(gt / f"{stem}_gtFine_labelTrainIds.png", CITYSCAPES_ID_TO_TRAINID[label_ids])
    return label_ids


@pytest.mark.parametrize("train_ids", [False, True])
def test_cityscapes_layout_maps_label_ids_to_train_ids(tmp_path, train_ids):
    label_ids = _cityscapes(tmp_path, train_ids)
    ds = open_segset(tmp_path, layout="cityscapes", split="val")
    assert ds.ids == ["frankfurt/frankfurt_000000_000000", "frankfurt/frankfurt_000000_000001",
                      "lindau/lindau_000000_000000"]
    assert ds.classes == CITYSCAPES_CLASSES and len(ds.classes) == 19
    _, mask = ds[2]
    names = CITYSCAPES_CLASSES.names
    assert [names[v] for v in mask[0, ::3]] == ["road", "sidewalk", "car", "person"]
    assert (mask[4:, :6] == 255).all()  # unlabeled, ego vehicle -> ignore
    assert [names[v] for v in mask[4, 6::3]] == ["bicycle", "sky"]
    np.testing.assert_array_equal(mask, CITYSCAPES_ID_TO_TRAINID[label_ids])
    assert open_segset(tmp_path, layout="cityscapes", split="val", ids=["lindau/lindau_000000_000000"]).ids == \
        ["lindau/lindau_000000_000000"]


def test_ade20k_layout_reduces_zero_label(tmp_path):
    root = tmp_path / "ADEChallengeData2016"
    values = np.array([[0, 1, 150, 13]], np.uint8).repeat(H, 0).repeat(3, 1)
    for split in ("training", "validation"):
        _image(root / "images" / split / f"ADE_{split}_00000001.jpg")
        _mask(root / "annotations" / split / f"ADE_{split}_00000001.png", values)
    ds = open_segset(tmp_path, layout="ade20k", split="val")
    assert ds.ids == ["ADE_validation_00000001"] and len(ds.classes) == 150
    mask = ds.load_mask(ds.ids[0])
    assert mask[0, 0] == 255  # 0 = "other" -> ignore
    assert [ds.classes.names[v] for v in mask[0, 3::3]] == ["wall", "flag", "person"]  # 150 is class 149
    _mask(root / "annotations" / "training" / "ADE_training_00000001.png", np.full((H, W), 151))
    with pytest.raises(ValueError, match=r"mask: .*0\.\.149.*\[150\]"):
        open_segset(tmp_path, layout="ade20k", split="train")[0]
    assert ADE20K_CLASSES.names[149] == "flag"


def test_classes_file_names_colours_and_ignore(tmp_path):
    (tmp_path / "classes.txt").write_text("# mine\nsky #4682b4\nroad 128 64 128  # a comment\n"
                                          "traffic light 250,170,30\nignore_index 0\n")
    with pytest.raises(ValueError, match="ignore_index"):  # 0 is a class id here
        read_classes(tmp_path / "classes.txt")
    (tmp_path / "classes.txt").write_text("0: sky #4682b4\n1: road 128 64 128\n2: traffic light 250,170,30\n"
                                          "ignore_index = 9\n")
    classes = read_classes(tmp_path / "classes.txt")
    assert classes.names == ("sky", "road", "traffic light") and classes.ignore_index == 9
    assert classes.palette.tolist() == [[70, 130, 180], [128, 64, 128], [250, 170, 30]]
    # colour-coded RGB masks decode through the file's colours
    _image(tmp_path / "images" / "a.jpg")
    rgb = np.zeros((H, W, 3), np.uint8)
    rgb[:] = (70, 130, 180)
    rgb[4:] = (250, 170, 30)
    (tmp_path / "masks").mkdir()
    Image.fromarray(rgb).save(tmp_path / "masks" / "a.png")
    ds = open_segset(tmp_path, classes=tmp_path / "classes.txt")
    assert ds.classes == classes
    np.testing.assert_array_equal(ds.load_mask("a"), np.r_[np.zeros((4, W)), np.full((4, W), 2)])
    (tmp_path / "c.json").write_text('{"id2label": {"0": "sky", "1": "road"}}')
    assert read_classes(tmp_path / "c.json").names == ("sky", "road")
    with pytest.raises(ValueError, match="classes: expected id 1"):
        (tmp_path / "bad.txt").write_text("0: a\n2: b\n")
        read_classes(tmp_path / "bad.txt")


def test_scan_maps_and_symlinked_masks_pair_by_the_id_rule(tmp_path):
    """A scan's maps folder (new names and legacy id + '.png') and a folder of symlinks serve as masks."""
    pool, maps, links = tmp_path / "pool", tmp_path / "scan" / "maps" / "target", tmp_path / "links"
    ids = ["cat.jpg", "street/dog.png", "old.jpeg"]
    for i, image_id in enumerate(ids):
        _image(pool / image_id, i)
        name = legacy_artifact_name(image_id) if image_id == "old.jpeg" else artifact_name(image_id)
        _mask(maps / name, np.full((H, W), i))
    ds = open_segset(tmp_path, images=pool, masks=maps)
    assert ds.ids == ["cat", "old", "street/dog"]
    assert [int(ds.load_mask(i)[0, 0]) for i in ds.ids] == [0, 2, 1]
    (links / "street").mkdir(parents=True)
    for image_id in ids:
        target = maps / (legacy_artifact_name(image_id) if image_id == "old.jpeg" else artifact_name(image_id))
        os.symlink(target, links / artifact_name(image_id))
    os.symlink(tmp_path / "nowhere.png", links / "dangling.png")
    linked = open_segset(tmp_path, images=pool, masks=links)
    assert linked.ids == ds.ids and "masks/dangling.png" in linked.excluded
    assert int(linked.load_mask("street/dog")[0, 0]) == 1


def test_no_pair_is_one_line_error_naming_layout(tmp_path):
    _image(tmp_path / "images" / "a.jpg")
    (tmp_path / "masks").mkdir()
    with pytest.raises(ValueError) as info:
        open_segset(tmp_path)
    assert "\n" not in str(info.value) and "layout 'index'" in str(info.value) and "a" in str(info.value)
    with pytest.raises(ValueError, match="layout: expected one of"):
        open_segset(tmp_path, layout="coco")
    with pytest.raises(ValueError, match="root: expected an existing"):
        open_segset(tmp_path / "nope", layout="voc")
    with pytest.raises(ValueError, match="masks: expected Cityscapes"):
        open_segset(tmp_path, layout="cityscapes")


def _toy_voc_model(images):
    """Probabilities favouring class 0 everywhere (21 VOC classes): every foreground label disagrees."""
    b, h, w, _ = np.asarray(images).shape
    p = np.full((b, 21, h, w), 0.1 / 20, np.float32)
    p[:, 0] = 0.9
    return p


def test_cli_label_issues_with_voc_layout_honours_ids(tmp_path):
    voc = _voc(tmp_path)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["label-issues", "--data", str(voc), "--layout", "voc", "--ids", "train",
                                   "--model", "test_segsets_layouts:_toy_voc_model?num_classes=21",
                                   "--out", str(out), "--no-progress", "--top", "1"])
    assert res.exit_code == 0, res.output
    assert sorted(pd.read_csv(out / "images.csv").id) == ["2007_000032", "2007_000039"]
    assert (out / "issues" / "2007_000039.png").is_file()
