"""Images of mixed sizes: iterables, model + dataset and the CLI group by size, never stack.

The reference: the same images zero-padded to one size with the padding labelled ignore_index — the
padding is excluded from thresholds, counts and ranking, so cropping the padded answer must give the
mixed-size answer exactly.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from PIL import Image
from typer.testing import CliRunner

from blindspots.cli import app
from blindspots.labels import find_label_issues, get_label_quality_scores, review_label_issues
from test_labels_cli import _write_set
from test_labels_helpers import structured_inputs

SIZES = [(8, 12), (8, 12), (10, 6), (8, 12), (4, 4), (10, 6)]
K = 3


def _items(seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = []
    for h, w in SIZES:
        lab, p = structured_inputs(rng, 1, K, h, w, np.float64, noise=0.3)
        out.append((lab[0], p[0]))
    return out


def _padded(items):
    """labels int [N, 10, 12] (padding = 255), probs float [N, K, 10, 12] (padding uniform)."""
    n = len(items)
    labels = np.full((n, 10, 12), 255, np.int64)
    probs = np.full((n, K, 10, 12), 1.0 / K)
    for i, (lab, p) in enumerate(items):
        h, w = lab.shape
        labels[i, :h, :w], probs[i, :, :h, :w] = lab, p
    return labels, probs


@pytest.mark.parametrize("as_iter", [False, True])
def test_mixed_iterable_matches_padded_arrays(as_iter):
    items = _items()
    batches = [(lab[None], p[None]) for lab, p in items]
    src = iter(batches) if as_iter else batches
    issues = find_label_issues(src, verbose=False)
    labels, probs = _padded(items)
    ref = find_label_issues(labels, probs, verbose=False)
    assert isinstance(issues, list) and [m.shape for m in issues] == SIZES
    for m, r, (h, w) in zip(issues, ref, SIZES):
        np.testing.assert_array_equal(m, r[:h, :w])
    assert sum(int(m.sum()) for m in issues) > 0

    scores, pix = get_label_quality_scores(iter(batches) if as_iter else batches, verbose=False)
    ref_scores, ref_pix = get_label_quality_scores(labels, probs, verbose=False)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-12)
    for a, r, (h, w) in zip(pix, ref_pix, SIZES):
        np.testing.assert_array_equal(a, r[:h, :w])

    s2, p2 = get_label_quality_scores(batches, method="num_pixel_issues", verbose=False)
    r2, _ = get_label_quality_scores(labels, probs, method="num_pixel_issues", verbose=False)
    np.testing.assert_allclose(s2, r2)
    assert [a.shape for a in p2] == SIZES


def test_mixed_sizes_with_downsample_and_one_size_batches():
    rng = np.random.default_rng(1)
    batches = [structured_inputs(rng, 2, K, 8, 12, np.float32), structured_inputs(rng, 1, K, 6, 4, np.float32),
               structured_inputs(rng, 3, K, 8, 12, np.float32)]
    issues = find_label_issues(batches, downsample=2, verbose=False)
    assert [m.shape for m in issues] == [(8, 12)] * 2 + [(6, 4)] + [(8, 12)] * 3
    with pytest.raises(ValueError, match="out"):
        find_label_issues(batches, out=np.zeros((6, 8, 12), bool), verbose=False)
    with pytest.raises(ValueError, match="downsample"):
        find_label_issues(batches + [structured_inputs(rng, 1, K, 5, 4, np.float32)], downsample=2, verbose=False)


class _Model:
    """predict_proba(uint8 [b, H, W, 3]) -> float [b, K, H, W]; refuses a batch of mixed sizes (as numpy would)."""

    def __init__(self, table):
        self.table, self.calls = table, []

    def predict_proba(self, images):
        images = np.asarray(images)
        self.calls.append(images.shape)
        return np.stack([self.table[int(im[0, 0, 0])] for im in images])


def test_model_and_dataset_of_mixed_sizes_match_padded_arrays():
    items = _items(2)
    dataset = []
    for i, (lab, _) in enumerate(items):
        image = np.zeros(lab.shape + (3,), np.uint8)
        image[0, 0, 0] = i  # tells the fake model which image it sees
        dataset.append((image, lab))
    model = _Model([p.astype(np.float32) for _, p in items])
    review = review_label_issues(model=model, dataset=dataset, model_batch_size=4, verbose=False)
    assert {s[1:3] for s in model.calls} == {(8, 12), (10, 6), (4, 4)}  # one forward per size per window
    labels, probs = _padded([(lab, p.astype(np.float32)) for lab, p in items])
    ref = review_label_issues(labels, probs, verbose=False)
    pd.testing.assert_frame_equal(review.images, ref.images)


def test_cli_label_issues_on_images_of_mixed_sizes(tmp_path):
    _write_set(tmp_path, sizes=[(32, 40), (24, 24), (32, 40), (40, 16)], image_ext=".jpg")
    out = tmp_path / "out"
    res = CliRunner().invoke(app, ["label-issues", "--images", str(tmp_path / "images"), "--masks",
                                   str(tmp_path / "masks"), "--model", "test_labels_cli:toy_model?num_classes=3",
                                   "--out", str(out), "--no-progress", "--top", "2", "--batch-size", "3"])
    assert res.exit_code == 0, res.output
    images = pd.read_csv(out / "images.csv")
    assert sorted(images.id) == ["img0", "img1", "img2", "img3"]
    assert images.id.iloc[0] == "img2"  # the image with the dropped object ranks worst
    assert np.asarray(Image.open(out / "issues" / "img3.png")).shape == (40, 16)


def test_mixed_size_model_pass_resumes_from_its_cache(tmp_path):
    items = _items(4)
    dataset = []
    for i, (lab, _) in enumerate(items):
        image = np.zeros(lab.shape + (3,), np.uint8)
        image[0, 0, 0] = i
        dataset.append((image, lab))
    table = [p.astype(np.float32) for _, p in items]
    expect = find_label_issues(model=_Model(table), dataset=dataset, verbose=False)

    class Interrupt(Exception):
        pass

    class Flaky(_Model):
        def predict_proba(self, images):
            if len(self.calls) == 3:  # the 4th forward pass: windows 1 and 2 (3 sizes) are cached
                raise Interrupt
            return super().predict_proba(images)

    cache = tmp_path / "cache"
    with pytest.raises(Interrupt):
        find_label_issues(model=Flaky(table), dataset=dataset, model_batch_size=2, cache_dir=cache, verbose=False)
    again = _Model(table)
    got = find_label_issues(model=again, dataset=dataset, model_batch_size=2, cache_dir=cache, verbose=False)
    assert sum(s[0] for s in again.calls) == 2  # only the last window (images 4, 5) is predicted again
    for g, e in zip(got, expect):
        np.testing.assert_array_equal(g, e)
