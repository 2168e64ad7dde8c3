"""get_label_quality_scores / issues_from_scores: softmin maths, streaming, ignore index."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blindspots.labels import get_label_quality_scores, issues_from_scores
from blindspots.labels.rank import softmin_pool
from test_labels_helpers import random_inputs, structured_inputs


def _softmin_reference(s: np.ndarray, t: float) -> float:
    w = np.exp((1 - s) / t)
    return float((s * w).sum() / w.sum())


def test_softmin_formula_and_limits():
    rng = np.random.default_rng(0)
    s = rng.random((3, 5, 4))
    got = softmin_pool(s, None, 0.1)
    for i in range(3):
        assert got[i] == pytest.approx(_softmin_reference(s[i].ravel(), 0.1), rel=1e-12)
    # low temperature -> min, high temperature -> mean
    assert softmin_pool(s, None, 1e-4) == pytest.approx(s.reshape(3, -1).min(1), abs=1e-6)
    assert softmin_pool(s, None, 1e6) == pytest.approx(s.reshape(3, -1).mean(1), rel=1e-5)


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(1, 5), t=st.floats(0.01, 5.0))
def test_scores_bounded_and_permutation_equivariant(seed, n, t):
    rng = np.random.default_rng(seed)
    labels, p = random_inputs(rng, n, 3, 5, 6)
    img, pix = get_label_quality_scores(labels, p, verbose=False, temperature=t)
    assert np.all((img >= pix.reshape(n, -1).min(1) - 1e-12) & (img <= pix.reshape(n, -1).max(1) + 1e-12))
    perm = rng.permutation(n)
    img2, pix2 = get_label_quality_scores(labels[perm], p[perm], verbose=False, temperature=t)
    np.testing.assert_allclose(img2, img[perm], rtol=1e-12)
    np.testing.assert_array_equal(pix2, pix[perm])


def test_streaming_inputs_give_the_same_scores(tmp_path):
    labels, p = structured_inputs(np.random.default_rng(1), 5, 4, 12, 20)
    img, pix = get_label_quality_scores(labels, p, verbose=False)
    for src in ([(labels[:2], p[:2]), (labels[2:], p[2:])], iter([(labels[i], p[i]) for i in range(5)])):
        a, b = get_label_quality_scores(src, verbose=False)
        np.testing.assert_array_equal(a, img)
        np.testing.assert_array_equal(b, pix)
    np.save(tmp_path / "l.npy", labels)
    np.save(tmp_path / "p.npy", p)
    a, b = get_label_quality_scores(tmp_path / "l.npy", tmp_path / "p.npy", verbose=False,
                                    pixel_scores_out=tmp_path / "pix.npy", batch_size=1)
    np.testing.assert_array_equal(a, img)
    np.testing.assert_array_equal(np.load(tmp_path / "pix.npy"), pix)
    a, b = get_label_quality_scores(iter([(labels, p)]), verbose=False, return_pixel_scores=False)
    assert b is None
    np.testing.assert_array_equal(a, img)


def test_ignored_pixels_do_not_count():
    rng = np.random.default_rng(2)
    labels, p = structured_inputs(rng, 3, 4, 10, 10, np.float64)
    ign = rng.random(labels.shape) < 0.4
    lab = labels.copy()
    lab[ign] = 255
    img, pix = get_label_quality_scores(lab, p, verbose=False)
    assert np.all(pix[ign] == 1.0)
    s = np.take_along_axis(p, labels[:, None], 1)[:, 0]
    for i in range(3):
        assert img[i] == pytest.approx(_softmin_reference(s[i][~ign[i]], 0.1), rel=1e-12)
    lab[0] = 255
    img, _ = get_label_quality_scores(lab, p, verbose=False)
    assert img[0] == 1.0
    img_np, _ = get_label_quality_scores(lab, p, verbose=False, method="num_pixel_issues")
    assert img_np[0] == 1.0 and np.all((img_np >= 0) & (img_np <= 1))


def test_issues_from_scores():
    img = np.array([0.5, 0.05, 0.2, 0.01])
    np.testing.assert_array_equal(issues_from_scores(img, threshold=0.1), [3, 1, 2])  # cleanlab's +1 quirk
    pix = np.array([[[0.05, 0.5]]])
    np.testing.assert_array_equal(issues_from_scores(np.array([0.1]), pix, 0.1), [[[True, False]]])
    for bad in (-0.1, 1.5, None):
        with pytest.raises(ValueError, match="threshold"):
            issues_from_scores(img, threshold=bad)
    with pytest.raises(ValueError, match="image_scores"):
        issues_from_scores(None)


def test_model_and_dataset_scores_match_arrays():
    from test_labels_filter import _model_set

    model, dataset, images, labels = _model_set(n=5)
    p = model.predict_proba(images)
    for method in ("softmin", "num_pixel_issues"):
        a, pa = get_label_quality_scores(labels, p, verbose=False, method=method)
        b, pb = get_label_quality_scores(model=model, dataset=dataset, model_batch_size=2, verbose=False, method=method)
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(pa, pb)
