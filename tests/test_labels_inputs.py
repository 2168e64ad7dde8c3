"""Bad inputs raise ValueErrors that name the argument and the problem."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots.labels import LabelIssueFinder, find_label_issues, get_label_quality_scores
from test_labels_helpers import random_inputs


@pytest.fixture
def good():
    return random_inputs(np.random.default_rng(0), 2, 3, 8, 8, np.float32)


@pytest.mark.parametrize("fn", [find_label_issues, get_label_quality_scores])
def test_bad_inputs(fn, good):
    labels, p = good
    cases = [
        ((labels[:1], p), "pred_probs.*match"),
        ((labels, p[:, :, :4]), "pred_probs.*match"),
        ((labels[0], p), "labels.*\\(N, H, W\\)"),
        ((labels, p[0]), "pred_probs.*\\(N, K, H, W\\)"),
        ((labels.astype(np.float32), p), "labels.*integer dtype"),
        ((labels, p.astype(np.int64)), "pred_probs.*floating"),
        ((labels, p - 0.5), "pred_probs.*>= 0"),  # logits, not probabilities (p * 1.5 only warns: cleanlab's input)
        ((labels, np.where(np.arange(8) == 5, np.inf, p).astype(np.float32)), "pred_probs.*finite"),
        ((labels, np.where(np.arange(8) == 3, np.nan, p).astype(np.float32)), "pred_probs.*sum"),
        ((np.where(labels == 0, 7, labels), p), "labels.*class ids"),
        ((np.where(labels == 0, -1, labels), p), "labels.*class ids"),
        ((labels, None), "pred_probs.*None"),
        ((None, p), "labels.*None"),
        (("/nonexistent/labels.npy", p), "labels.*npy"),
    ]
    for args, msg in cases:
        with pytest.raises(ValueError, match=msg):
            fn(*args, verbose=False)


@pytest.mark.parametrize("fn", [find_label_issues, get_label_quality_scores])
def test_bad_settings(fn, good):
    labels, p = good
    kw = {"method": "num_pixel_issues"} if fn is get_label_quality_scores else {}
    with pytest.raises(ValueError, match="downsample"):
        fn(labels, p, verbose=False, downsample=3, **kw)
    with pytest.raises(ValueError, match="downsample"):
        fn(labels, p, verbose=False, downsample=0)
    with pytest.raises(ValueError, match="ignore_index"):
        fn(labels, p, verbose=False, ignore_index="255")
    with pytest.raises(ValueError, match="batch_size"):
        fn(labels, p, verbose=False, batch_size=0)
    with pytest.raises(ValueError, match="kwargs"):
        fn(labels, p, verbose=False, nonsense=1)


def test_bad_rank_settings(good):
    labels, p = good
    with pytest.raises(ValueError, match="method"):
        get_label_quality_scores(labels, p, verbose=False, method="mean")
    for t in (0, -1, None):
        with pytest.raises(ValueError, match="temperature"):
            get_label_quality_scores(labels, p, verbose=False, temperature=t)
    with pytest.raises(ValueError, match="pixel_scores_out"):
        get_label_quality_scores(labels, p, verbose=False, pixel_scores_out=np.zeros((1, 8, 8)))


def test_bad_batches_and_model_args(good):
    labels, p = good
    with pytest.raises(ValueError, match="pair"):
        find_label_issues(iter([labels]), verbose=False)
    with pytest.raises(ValueError, match="every batch"):  # sizes may differ, classes may not
        two = np.concatenate([p[:, :2], p[:, 2:]], axis=1)[:, :2] / p[:, :2].sum(1, keepdims=True)
        find_label_issues(iter([(labels, p), (np.minimum(labels, 1), two)]), verbose=False)
    with pytest.raises(ValueError, match="at least one batch"):
        find_label_issues(iter([]), verbose=False)
    with pytest.raises(ValueError, match="model"):
        find_label_issues(dataset=[(np.zeros((8, 8, 3), np.uint8), labels[0])], verbose=False)
    with pytest.raises(ValueError, match="model"):
        find_label_issues(model=object(), dataset=[], verbose=False)
    with pytest.raises(ValueError, match="self.*fit"):
        next(LabelIssueFinder().iter_batches())
    with pytest.raises(ValueError, match="out"):
        LabelIssueFinder(verbose=False).fit(labels, p).transform(out=np.zeros((2, 8, 8)))


def test_softmin_warns_that_downsample_is_unused(good):
    labels, p = good
    with pytest.warns(UserWarning, match="downsample"):
        get_label_quality_scores(labels, p, verbose=False, downsample=2)
