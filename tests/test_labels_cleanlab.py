"""Our label-issue engine against cleanlab 2.9 (a test-only dependency) on the same inputs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

cleanlab = pytest.importorskip("cleanlab")
from cleanlab.experimental.label_issues_batched import LabelInspector  # noqa: E402
from cleanlab.segmentation import filter as cl_filter  # noqa: E402
from cleanlab.segmentation import rank as cl_rank  # noqa: E402
from cleanlab.segmentation import summary as cl_summary  # noqa: E402

from blindspots.labels import LabelIssueFinder, find_label_issues, get_label_quality_scores, issues_from_scores  # noqa: E402
from blindspots.labels.summary import common_label_issues, filter_by_class  # noqa: E402
from test_labels_helpers import random_inputs, structured_inputs  # noqa: E402

warnings.filterwarnings("ignore", category=UserWarning)

CASES = [
    # (n, k, h, w, dtype, label_classes, generator)
    (1, 3, 8, 8, np.float64, None, "random"),
    (1, 2, 1, 1, np.float32, None, "random"),
    (3, 4, 5, 7, np.float32, 2, "random"),      # classes 2, 3 never labelled
    (4, 5, 16, 9, np.float64, 3, "random"),
    (2, 10, 32, 48, np.float32, None, "random"),
    (5, 6, 24, 24, np.float32, None, "structured"),
    (3, 19, 16, 32, np.float64, None, "structured"),
    (2, 2, 33, 17, np.float32, None, "structured"),
]


def _make(case, seed):
    n, k, h, w, dtype, lc, gen = case
    rng = np.random.default_rng(seed)
    if gen == "random":
        return random_inputs(rng, n, k, h, w, dtype, lc)
    return structured_inputs(rng, n, k, h, w, dtype)


def _cl_num_issues(labels, pred_probs):
    """cleanlab's estimated number of issues (before the argmax filter), one image per batch as in
    cleanlab.segmentation.filter."""
    k = pred_probs.shape[1]
    lab = LabelInspector(num_class=k, verbose=False, n_jobs=1)
    for i in range(len(labels)):
        lab.update_confident_thresholds(labels[i].ravel(), np.moveaxis(pred_probs[i], 0, -1).reshape(-1, k))
    for i in range(len(labels)):
        lab.score_label_quality(labels[i].ravel(), np.moveaxis(pred_probs[i], 0, -1).reshape(-1, k))
    return int(lab.get_num_issues(silent=True)), lab.get_confident_thresholds(silent=True)


def assert_same_issues(ours, theirs, labels, pred_probs, finder):
    """Identical masks, except among pixels tied exactly at the cut-off score."""
    if np.array_equal(ours, theirs):
        return
    assert finder.cutoff_ is not None
    score = np.take_along_axis(pred_probs, labels[:, None], axis=1)[:, 0]
    diff = ours != theirs
    assert np.all(score[diff] == finder._cutoff_value), "masks differ away from the cut-off"
    tied_mismatch = (score == finder._cutoff_value) & (pred_probs.argmax(1) != labels)
    if tied_mismatch.sum() == (score == finder._cutoff_value).sum():  # every tie is flaggable
        assert ours.sum() == theirs.sum()


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}x{c[1]}x{c[2]}x{c[3]}-{np.dtype(c[4]).name}-{c[6]}" for c in CASES])
@pytest.mark.parametrize("batch_size", [None, 1, 700])
def test_scores_and_issues_match_cleanlab(case, batch_size):
    labels, pred_probs = _make(case, seed=sum(case[:4]))
    img_cl, pix_cl = cl_rank.get_label_quality_scores(labels, pred_probs, verbose=False)
    img, pix = get_label_quality_scores(labels, pred_probs, verbose=False, batch_size=batch_size)
    np.testing.assert_allclose(img, img_cl, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(pix, pix_cl)  # a gather: exactly the same values
    assert img.dtype == np.float64 and pix.dtype == pred_probs.dtype

    theirs = cl_filter.find_label_issues(labels, pred_probs, verbose=False, n_jobs=1)
    finder = LabelIssueFinder(verbose=False, batch_size=batch_size).fit(labels, pred_probs)
    ours = finder.transform()
    n_cl, thr_cl = _cl_num_issues(labels, pred_probs)
    assert finder.num_issues_ == n_cl
    np.testing.assert_allclose(finder.confident_thresholds_, thr_cl, rtol=1e-5, atol=1e-12)
    assert_same_issues(ours, theirs, labels, pred_probs, finder)
    np.testing.assert_array_equal(find_label_issues(labels, pred_probs, verbose=False, batch_size=batch_size), ours)


def test_exact_ties_at_cutoff_only_differ_among_ties():
    rng = np.random.default_rng(3)
    labels, p = random_inputs(rng, 4, 4, 16, 16, np.float64)
    p = np.round(p * 8) + 1.0  # quantised probabilities: many exact ties
    p /= p.sum(axis=1, keepdims=True)
    theirs = cl_filter.find_label_issues(labels, p, verbose=False, n_jobs=1)
    finder = LabelIssueFinder(verbose=False).fit(labels, p)
    ours = finder.transform()
    score = np.take_along_axis(p, labels[:, None], axis=1)[:, 0]
    assert (score == finder._cutoff_value).sum() > 1  # the test really has ties
    assert finder.num_issues_ == _cl_num_issues(labels, p)[0]
    assert_same_issues(ours, theirs, labels, p, finder)
    # our tie-break is positional: the flagged ties are the first ones in (image, row, column) order
    tied = np.flatnonzero(score.ravel() == finder._cutoff_value)
    below = int((score < finder._cutoff_value).sum())
    taken = finder.num_issues_ - below
    pre_filter = (score < finder._cutoff_value).ravel()
    pre_filter[tied[:taken]] = True
    expect = pre_filter.reshape(score.shape) & (p.argmax(1) != labels)
    np.testing.assert_array_equal(ours, expect)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_num_pixel_issues_matches_cleanlab(dtype):
    labels, p = structured_inputs(np.random.default_rng(5), 3, 5, 20, 12, dtype)
    img_cl, pix_cl = cl_rank.get_label_quality_scores(labels, p, method="num_pixel_issues", verbose=False, n_jobs=1)
    img, pix = get_label_quality_scores(labels, p, method="num_pixel_issues", verbose=False)
    np.testing.assert_allclose(img, img_cl, atol=1e-12)
    np.testing.assert_array_equal(pix, pix_cl)


def test_temperature_matches_cleanlab():
    labels, p = structured_inputs(np.random.default_rng(6), 3, 4, 16, 16)
    for t in (0.01, 0.5, 3.0):
        a, _ = cl_rank.get_label_quality_scores(labels, p, verbose=False, temperature=t)
        b, _ = get_label_quality_scores(labels, p, verbose=False, temperature=t)
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)


def test_downsample_matches_cleanlab_when_blocks_are_uniform():
    """With labels constant in each block, majority and cleanlab's rounded mean agree."""
    rng = np.random.default_rng(7)
    small_labels, p = structured_inputs(rng, 3, 4, 16, 16, np.float64)
    labels = small_labels[:, ::2, ::2].repeat(2, axis=1).repeat(2, axis=2)
    theirs = cl_filter.find_label_issues(labels, p, verbose=False, n_jobs=1, downsample=2)
    ours = find_label_issues(labels, p, verbose=False, downsample=2)
    np.testing.assert_array_equal(ours, theirs)


def test_issues_from_scores_matches_cleanlab():
    labels, p = structured_inputs(np.random.default_rng(8), 6, 4, 16, 16)
    img, pix = get_label_quality_scores(labels, p, verbose=False)
    for thr in (0.0, 0.1, 0.5, 1.0):
        np.testing.assert_array_equal(issues_from_scores(img, pix, thr), cl_rank.issues_from_scores(img, pix, thr))
        np.testing.assert_array_equal(np.sort(issues_from_scores(img, threshold=thr)),
                                      np.sort(cl_rank.issues_from_scores(img, threshold=thr)))


def test_summaries_match_cleanlab():
    labels, p = structured_inputs(np.random.default_rng(9), 4, 5, 24, 24)
    issues = find_label_issues(labels, p, verbose=False)
    assert issues.any()
    names = ["a", "b", "c", "d", "e"]
    for kw in ({}, {"class_names": names}, {"exclude": [1], "top": 3}):
        theirs = cl_summary.common_label_issues(issues, labels, p, verbose=False, **kw)
        ours = common_label_issues(issues, labels, p, verbose=False, **kw)
        assert list(ours.columns) == list(theirs.columns)
        assert ours.astype(str).values.tolist() == theirs.astype(str).values.tolist()
    for c in range(5):
        np.testing.assert_array_equal(filter_by_class(c, issues, labels, p),
                                      cl_summary.filter_by_class(c, issues, labels, p))
