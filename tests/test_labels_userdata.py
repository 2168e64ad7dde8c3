"""`blindspots label-issues` on data laid out as users have it: precomputed probabilities, masks with
ids beyond the model's classes, corrupt or mis-sized masks (each test failed before its fix)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app

K = 3


def _write_set(root: Path, sizes=((24, 32), (24, 32), (20, 28))) -> dict[str, np.ndarray]:
    """An index folder (images/, masks/) of len(sizes) images of mixed sizes; img1's object is relabelled
    class 2 (a label error). Returns the clean masks by id."""
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(parents=True, exist_ok=True)
    clean = {}
    for i, (h, w) in enumerate(sizes):
        mask = np.zeros((h, w), np.uint8)
        mask[h // 4: h // 2, w // 4: w // 2] = 1
        mask[h // 2:, w // 2:] = 2
        clean[f"img{i}"] = mask.copy()
        image = np.stack([mask * 100] * 3, -1).astype(np.uint8)
        if i == 1:
            mask[mask == 1] = 2
        mask[0, :3] = 255
        Image.fromarray(image).save(root / "images" / f"img{i}.png")
        Image.fromarray(mask).save(root / "masks" / f"img{i}.png")
    return clean


def _write_probs(folder: Path, clean: dict[str, np.ndarray]) -> None:
    """<id>.npy float32 [K, H, W] per image: a confident model that knows the clean masks."""
    folder.mkdir(parents=True, exist_ok=True)
    for k, m in clean.items():
        p = np.eye(K, dtype=np.float32)[m].transpose(2, 0, 1) * 0.9 + 0.1 / K
        np.save(folder / f"{k}.npy", p)


def test_cli_precomputed_probability_folder(tmp_path):
    """--model FOLDER of <id>.npy (the --help's 'a folder of <id>.npy probabilities') used to fail with
    'a PrecomputedSegmenter is keyed by image id, not pixels'."""
    clean = _write_set(tmp_path)
    _write_probs(tmp_path / "probs", clean)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["label-issues", "--images", str(tmp_path / "images"), "--masks",
                                   str(tmp_path / "masks"), "--model", str(tmp_path / "probs"), "--out", str(out),
                                   "--no-progress"])
    assert res.exit_code == 0, res.output
    images = pd.read_csv(out / "images.csv")
    assert images.id.iloc[0] == "img1"  # the relabelled object ranks worst
    assert images.set_index("id").issue_pixels["img1"] > 0
    assert (out / "worst.png").is_file()


def test_api_precomputed_model_with_dataset(tmp_path):
    from blindspots.data.segsets import open_segset
    from blindspots.labels.review import review_label_issues
    from blindspots.models.load import load_model

    clean = _write_set(tmp_path)
    _write_probs(tmp_path / "probs", clean)
    review = review_label_issues(model=load_model(str(tmp_path / "probs")), dataset=open_segset(tmp_path),
                                 verbose=False)
    assert list(review.images.id)[0] == "img1"


def test_cli_mask_class_beyond_the_model_names_file_count_and_fix(tmp_path):
    """A mask holding class 7 with a 3-class model used to say only 'got 7 at image 2, pixel (5, 5)'."""
    clean = _write_set(tmp_path)
    _write_probs(tmp_path / "probs", clean)
    m = np.array(Image.open(tmp_path / "masks" / "img2.png"))
    m[5, 5] = 7
    Image.fromarray(m).save(tmp_path / "masks" / "img2.png")
    res = CliRunner().invoke(app, ["label-issues", "--images", str(tmp_path / "images"), "--masks",
                                   str(tmp_path / "masks"), "--model", str(tmp_path / "probs"), "--out",
                                   str(tmp_path / "out"), "--no-progress"])
    assert res.exit_code != 0
    text = " ".join(res.output.split())
    assert "image 'img2'" in text and "img2.png" in text
    assert "got 7" in text and "pixel (5, 5)" in text
    assert "the model predicts only 3 classes (0..2)" in text
    assert "map that class" in text


def test_api_bad_label_names_count_and_id():
    from blindspots.labels import find_label_issues
    from blindspots.labels.review import review_label_issues

    labels = np.zeros((2, 4, 4), np.int64)
    labels[1, 2, 3] = 5
    probs = np.full((2, 3, 4, 4), 1 / 3)
    with np.testing.assert_raises_regex(ValueError, r"got 5 at image 1, pixel \(2, 3\); .*predicts only 3 classes"):
        find_label_issues(labels, probs)
    with np.testing.assert_raises_regex(ValueError, r"got 5 in image 'b', pixel \(2, 3\); .*predicts only 3"):
        review_label_issues(labels, probs, ids=["a", "b"], verbose=False)


def test_api_plain_function_as_model_says_how_to_wrap_it(tmp_path):
    """A plain function as model= used to say only 'expected a Segmenter with predict_proba, got function'."""
    from blindspots.data.segsets import open_segset
    from blindspots.labels.review import review_label_issues

    _write_set(tmp_path)

    def seg(images: np.ndarray) -> np.ndarray:
        return np.full((len(images), K) + images.shape[1:3], 1 / K, np.float32)

    with np.testing.assert_raises_regex(ValueError, r"model: expected a Segmenter with predict_proba \(wrap .*"
                                                    r"CallableSegmenter\(f\).*got function"):
        review_label_issues(model=seg, dataset=open_segset(tmp_path), verbose=False)


def test_cli_arrays_without_ids_issue_masks_named_by_the_table_ids(tmp_path):
    """--labels/--probs without --ids: images.csv says ids 0, 1, ... but the masks were 000000.png, ...
    (docs: issues/<id>.png)."""
    clean = _write_set(tmp_path, sizes=((24, 32),) * 3)
    labels = np.stack([np.array(Image.open(tmp_path / "masks" / f"img{i}.png")) for i in range(3)])
    probs = np.stack([np.eye(K, dtype=np.float32)[clean[f"img{i}"]].transpose(2, 0, 1) * 0.9 + 0.1 / K
                      for i in range(3)])
    np.save(tmp_path / "l.npy", labels)
    np.save(tmp_path / "p.npy", probs)
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["label-issues", "--labels", str(tmp_path / "l.npy"), "--probs",
                                   str(tmp_path / "p.npy"), "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    ids = pd.read_csv(out / "images.csv", dtype={"id": str}).id
    assert sorted(ids) == ["0", "1", "2"]
    for i in ids:
        assert (out / "issues" / f"{i}.png").is_file()
    flagged = np.array(Image.open(out / "issues" / "1.png")) > 0
    assert flagged.any()


def _arrays(tmp_path: Path, ignore: int = 255) -> None:
    """l.npy int [3, 24, 32] (image 1 mislabelled, `ignore` in a corner) and p.npy float32 [3, K, 24, 32]."""
    clean = _write_set(tmp_path, sizes=((24, 32),) * 3)
    labels = np.stack([np.array(Image.open(tmp_path / "masks" / f"img{i}.png")) for i in range(3)])
    labels[labels == 255] = ignore
    probs = np.stack([np.eye(K, dtype=np.float32)[clean[f"img{i}"]].transpose(2, 0, 1) * 0.9 + 0.1 / K
                      for i in range(3)])
    np.save(tmp_path / "l.npy", labels)
    np.save(tmp_path / "p.npy", probs)


def test_cli_arrays_use_the_classes_file(tmp_path):
    """--classes with --labels/--probs was ignored silently: its ignore value (here 254) was not used and
    its names never reached the output."""
    _arrays(tmp_path, ignore=254)
    (tmp_path / "classes.txt").write_text("sky\nroad\ncar\nignore_index 254\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["label-issues", "--labels", str(tmp_path / "l.npy"), "--probs",
                                   str(tmp_path / "p.npy"), "--classes", str(tmp_path / "classes.txt"),
                                   "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    import json

    assert json.loads((out / "summary.json").read_text())["class_names"] == ["sky", "road", "car"]


def test_report_names_the_classes_of_regions_and_confusions(tmp_path):
    from blindspots.report.pages.label_issues import write_label_issues_report

    _arrays(tmp_path)
    (tmp_path / "classes.txt").write_text("sky\nroad\ncar\n")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["label-issues", "--labels", str(tmp_path / "l.npy"), "--probs",
                                   str(tmp_path / "p.npy"), "--classes", str(tmp_path / "classes.txt"),
                                   "--out", str(out), "--no-progress"])
    assert res.exit_code == 0, res.output
    html = write_label_issues_report(out, tmp_path / "rep").read_text()
    confusions = html[html.index("Most common confusions"):]
    assert "<td>2 car</td><td>1 road</td>" in confusions  # img1's object: given car, predicted road


def test_mixed_sizes_errors_name_the_image():
    """With images of mixed sizes, a downsample that does not divide one of them and a mask at another size
    than its image did not say which image (or what to do)."""
    from blindspots.labels import find_label_issues
    from blindspots.labels.review import review_label_issues
    from blindspots.models.adapters.callable import CallableSegmenter

    batches = [(np.zeros((8, 8), np.int64), np.full((K, 8, 8), 1 / K)),
               (np.zeros((12, 10), np.int64), np.full((K, 12, 10), 1 / K))]
    with np.testing.assert_raises_regex(ValueError, r"got 4 at image 1; use a downsample that divides every"):
        find_label_issues(batches, None, downsample=4, verbose=False)

    def seg(images: np.ndarray) -> np.ndarray:
        return np.full((len(images), K) + images.shape[1:3], 1 / K, np.float32)

    data = [(np.zeros((8, 8, 3), np.uint8), np.zeros((8, 8), np.uint8)),
            (np.zeros((8, 8, 3), np.uint8), np.zeros((6, 8), np.uint8))]
    with np.testing.assert_raises_regex(ValueError, r"expected each mask at its image's size \(8, 8\), got "
                                                    r"\(6, 8\) at image 1; resize"):
        review_label_issues(model=CallableSegmenter(seg, K), dataset=data, verbose=False)


def test_rgb_mask_without_classes_says_to_give_a_classes_file(tmp_path):
    from blindspots.data.segsets import decode_mask

    Image.fromarray(np.zeros((4, 4, 3), np.uint8)).save(tmp_path / "m.png")
    with np.testing.assert_raises_regex(ValueError, r"RGB mask .*m.png, got None; give a classes file"):
        decode_mask(tmp_path / "m.png")


def test_cli_cache_dir_reused_with_another_model_is_rebuilt(tmp_path):
    """--cache-dir reused with another --model returned the first model's results silently (the cache
    was 'resumed' because settings and image count matched)."""
    clean = _write_set(tmp_path)
    _write_probs(tmp_path / "good", clean)
    flat = tmp_path / "flat"
    flat.mkdir()
    for k, m in clean.items():
        np.save(flat / f"{k}.npy", np.full((K,) + m.shape, 1 / K, np.float32))
    args = ["label-issues", "--images", str(tmp_path / "images"), "--masks", str(tmp_path / "masks"),
            "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    first = CliRunner().invoke(app, args + ["--model", str(tmp_path / "good"), "--out", str(tmp_path / "o1")])
    assert first.exit_code == 0, first.output
    again = CliRunner().invoke(app, args + ["--model", str(flat), "--out", str(tmp_path / "o2")])
    assert again.exit_code == 0, again.output
    scores = pd.read_csv(tmp_path / "o2" / "images.csv").image_score
    np.testing.assert_allclose(scores, 1 / K, rtol=1e-5)  # the flat model's scores, not the first model's


def test_cli_stray_mask_says_how_to_pick_a_subset(tmp_path):
    """A mask without an image said only 'pass ids=...', a Python argument, on the command line."""
    clean = _write_set(tmp_path)
    _write_probs(tmp_path / "probs", clean)
    (tmp_path / "masks" / "extra.png").write_bytes((tmp_path / "masks" / "img0.png").read_bytes())
    res = CliRunner().invoke(app, ["label-issues", "--data", str(tmp_path), "--model", str(tmp_path / "probs"),
                                   "--out", str(tmp_path / "out"), "--no-progress"])
    assert res.exit_code != 0
    text = " ".join(res.output.split())
    assert "'extra'" in text and "--ids FILE" in text


def test_summaries_take_the_mixed_size_lists_find_label_issues_returns():
    """find_label_issues returns a list of [H_i, W_i] masks for images of mixed sizes; common_label_issues,
    filter_by_class and display_issues failed on them with numpy's 'inhomogeneous shape' error."""
    from blindspots.labels import common_label_issues, display_issues, filter_by_class, find_label_issues

    rng = np.random.default_rng(0)
    labels, probs = [], []
    for h, w in ((12, 16), (10, 8), (12, 16)):
        lab = rng.integers(0, K, (h, w))
        p = rng.random((K, h, w)).astype(np.float32) + 2 * np.eye(K, dtype=np.float32)[lab].transpose(2, 0, 1)
        lab[rng.random((h, w)) < 0.2] = rng.integers(0, K)  # label noise
        labels.append(lab)
        probs.append(p / p.sum(0))
    issues = find_label_issues(list(zip(labels, probs)), None, verbose=False)
    assert isinstance(issues, list) and any(m.any() for m in issues)
    got = common_label_issues(issues, labels, probs, verbose=False)
    one = [common_label_issues(m[None], a[None], p[None], verbose=False) for m, a, p in zip(issues, labels, probs)]
    expect = pd.concat(one).groupby(["given_label", "predicted_label"]).num_pixel_issues.sum()
    assert got.set_index(["given_label", "predicted_label"]).num_pixel_issues.sort_index().to_dict() == \
        expect.sort_index().to_dict()
    kept = filter_by_class(1, issues, labels, probs)
    for m, a, p, k in zip(issues, labels, probs, kept):
        np.testing.assert_array_equal(k, filter_by_class(1, m[None], a[None], p[None])[0])
    fig = display_issues(issues, labels=labels, pred_probs=probs, top=2, show=False)
    assert len(fig.axes) == 2 * 3
    with np.testing.assert_raises_regex(ValueError, r"labels: expected a list of 3 int \[H, W\] arrays"):
        common_label_issues(issues, np.zeros((3, 12, 16), np.int64), probs, verbose=False)


def test_binary_masks_saved_as_0_255_warn_that_the_foreground_is_ignored(tmp_path):
    """Binary masks with a white (255) foreground: every object pixel was read as ignore_index 255 and
    never checked, with scores of 1.0 and no word about it."""
    import pytest

    from blindspots.labels.review import review_label_issues

    labels = np.zeros((2, 8, 8), np.uint8)
    labels[:, 2:6, 2:6] = 255
    probs = np.stack([np.full((8, 8), 0.9), np.full((8, 8), 0.1)])[None].repeat(2, 0)
    with pytest.warns(UserWarning, match=r"every labelled pixel is class 0 and 25% of the pixels are ignore_index "
                                         r"255.*np.where\(m == 255, 1, m\)"):
        review_label_issues(labels, probs, verbose=False)
    labels[:, 0, 0] = 1  # a real class 1 somewhere: 255 is a genuine ignore value, no warning
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        review_label_issues(labels, probs, verbose=False)
