"""`blindspots label-issues` end to end: model + image/mask folders, and saved arrays."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.labels import find_label_issues
from test_labels_helpers import structured_inputs

K = 3
_W = np.array([[1.0, -0.5, -0.5], [-0.5, 1.0, -0.5], [-0.5, -0.5, 1.0]]) / 20.0


def toy_model(images: np.ndarray) -> np.ndarray:
    """A deterministic 3-class per-pixel model: softmax of a linear map of RGB (for 'module:function')."""
    z = np.asarray(images, np.float64) @ _W
    z = np.exp(z - z.max(-1, keepdims=True))
    return np.moveaxis(z / z.sum(-1, keepdims=True), -1, 1).astype(np.float32)


def _write_set(root, n=5, h=32, w=40, seed=0, sizes=None, image_ext=".png"):
    """n image/mask pairs img<i>; image 2 misses its class-1 object. sizes: one (h, w) per image instead
    (objects placed relative to the size), for sets of mixed sizes."""
    rng = np.random.default_rng(seed)
    masks = {}
    for i in range(n if sizes is None else len(sizes)):
        mask = np.zeros((h, w) if sizes is None else sizes[i], np.uint8)
        if sizes is None:
            mask[4:20, 5:25] = 1
            mask[22:30, 20:38] = 2
        else:
            hh, ww = sizes[i]
            mask[hh // 4: hh // 2, ww // 4: ww // 2] = 1
            mask[hh // 2:, ww // 2:] = 2
        image = np.zeros(mask.shape + (3,), np.uint8)
        image[..., 0] = 200
        for c in (1, 2):
            image[mask == c] = [0, 0, 0]
            image[..., c][mask == c] = 200
        image = np.clip(image.astype(int) + rng.integers(-30, 30, image.shape), 0, 255).astype(np.uint8)
        if i == 2:
            mask[mask == 1] = 0  # a dropped object
        mask[0, :4] = 255
        masks[f"img{i}"] = mask
        (root / "images").mkdir(parents=True, exist_ok=True)
        (root / "masks").mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(root / "images" / f"img{i}{image_ext}")
        Image.fromarray(mask).save(root / "masks" / f"img{i}.png")
    return masks


def test_cli_model_and_folders(tmp_path):
    masks = _write_set(tmp_path)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["label-issues", "--images", str(tmp_path / "images"), "--masks",
                                   str(tmp_path / "masks"), "--model", "test_labels_cli:toy_model?num_classes=3",
                                   "--out", str(out), "--no-progress", "--min-area", "4", "--top", "3"])
    assert res.exit_code == 0, res.output
    images = pd.read_csv(out / "images.csv")
    assert images.id.iloc[0] == "img2"  # the image with the dropped object ranks worst
    regions = pd.read_csv(out / "regions.csv")
    worst = regions[regions.id == "img2"].iloc[0]
    assert (worst.kind, worst.given_label, worst.predicted_label) == ("missing", 0, 1)
    assert (worst.x0, worst.y0, worst.x1, worst.y1) == (5, 4, 25, 20)
    issue = np.asarray(Image.open(out / "issues" / "img2.png")) > 0
    assert issue[4:20, 5:25].mean() > 0.6 and not issue[0, :4].any()
    assert (out / "worst.png").stat().st_size > 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_images"] == 5 and summary["regions_by_kind"]["missing"] >= 1


def test_cli_saved_arrays_parquet(tmp_path):
    labels, p = structured_inputs(np.random.default_rng(0), 4, 4, 16, 24)
    np.save(tmp_path / "l.npy", labels.astype(np.uint8))
    np.save(tmp_path / "p.npy", p)
    (tmp_path / "ids.txt").write_text("a\nb\nc\nd\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["label-issues", "--labels", str(tmp_path / "l.npy"), "--probs",
                                   str(tmp_path / "p.npy"), "--ids", str(tmp_path / "ids.txt"), "--out", str(out),
                                   "--format", "parquet", "--no-progress", "--min-area", "1"])
    assert res.exit_code == 0, res.output
    images = pd.read_parquet(out / "images.parquet")
    expect = find_label_issues(labels, p, verbose=False)
    got = {r.id: r.issue_pixels for r in images.itertuples()}
    assert got == {k: int(expect[i].sum()) for i, k in enumerate("abcd")}
    for i, k in enumerate("abcd"):
        np.testing.assert_array_equal(np.asarray(Image.open(out / "issues" / f"{k}.png")) > 0, expect[i])


def test_cli_bad_arguments(tmp_path):
    res = CliRunner().invoke(app, ["label-issues", "--out", str(tmp_path / "o")])
    assert res.exit_code != 0
    np.save(tmp_path / "l.npy", np.zeros((2, 4, 4), np.uint8))
    # negative values are invalid (rows merely not summing to 1 are accepted with a warning, as cleanlab does)
    np.save(tmp_path / "p.npy", np.full((2, 3, 4, 4), -0.5, np.float32))
    res = CliRunner().invoke(app, ["label-issues", "--labels", str(tmp_path / "l.npy"), "--probs",
                                   str(tmp_path / "p.npy"), "--out", str(tmp_path / "o"), "--no-progress"])
    assert res.exit_code == 2 and "pred_probs" in res.output
