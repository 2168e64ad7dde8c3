"""Softmin scores on several threads (n_jobs) equal the one-thread scores, chunk for chunk.

Chunks are scored on worker threads and consumed in order: the results, the pixel-score layout
(arrays, memory-mapped outputs, lists for mixed sizes), the one warning for unnormalised inputs and
the first error must not depend on n_jobs.
"""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from blindspots.labels import get_label_quality_scores


def _inputs(seed: int, n: int, k: int, h: int, w: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    z = rng.normal(size=(n, k, h, w)).astype(np.float32) * 3
    p = np.exp(z - z.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    labels = rng.integers(0, k, (n, h, w)).astype(np.uint8)
    labels[:, :2, :3] = 255  # ignored pixels
    return labels, p


@pytest.mark.parametrize("batch_size", [None, 4 * 9 * 11, 2 * 4 * 9 * 11])
def test_threads_give_the_same_scores_as_one_thread(batch_size):
    labels, p = _inputs(0, 13, 4, 9, 11)
    one = get_label_quality_scores(labels, p, verbose=False, n_jobs=1, batch_size=batch_size)
    for jobs in (2, 3):
        img, pix = get_label_quality_scores(labels, p, verbose=False, n_jobs=jobs, batch_size=batch_size)
        np.testing.assert_array_equal(img, one[0])
        np.testing.assert_array_equal(pix, one[1])


def test_threads_write_a_memory_mapped_output(tmp_path):
    labels, p = _inputs(1, 7, 3, 8, 8)
    img1, pix1 = get_label_quality_scores(labels, p, verbose=False, n_jobs=1, batch_size=3 * 64)
    img2, pix2 = get_label_quality_scores(labels, p, verbose=False, n_jobs=2, batch_size=3 * 64,
                                          pixel_scores_out=tmp_path / "pix.npy")
    np.testing.assert_array_equal(img2, img1)
    np.testing.assert_array_equal(np.load(tmp_path / "pix.npy"), pix1)


def test_threads_keep_mixed_sizes_in_order():
    """Same-size chunks already handed to a thread when a new size arrives still land in the list."""
    sizes = [(6, 7), (6, 7), (6, 7), (5, 9), (6, 7), (6, 7), (4, 4)]
    batches = []
    for i, (h, w) in enumerate(sizes):
        lab, p = _inputs(10 + i, 2, 3, h, w)
        batches.append((lab, p))
    one_img, one_pix = get_label_quality_scores(batches, verbose=False, n_jobs=1)
    img, pix = get_label_quality_scores(batches, verbose=False, n_jobs=2)
    np.testing.assert_array_equal(img, one_img)
    assert isinstance(pix, list) and len(pix) == 2 * len(sizes)
    for a, b, (h, w) in zip(pix, one_pix, [s for s in sizes for _ in range(2)]):
        assert a.shape == (h, w)
        np.testing.assert_array_equal(a, b)


def test_threads_warn_once_for_unnormalised_inputs():
    rng = np.random.default_rng(3)
    labels, p = rng.integers(0, 3, (9, 5, 6)), rng.random((9, 3, 5, 6))
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        img, _ = get_label_quality_scores(labels, p, verbose=False, n_jobs=2, batch_size=3 * 30)
        assert len([r for r in rec if "sum to 1" in str(r.message)]) == 1
        one, _ = get_label_quality_scores(labels, p, verbose=False, n_jobs=1, batch_size=3 * 30)
    np.testing.assert_array_equal(img, one)


def test_threads_raise_the_first_error_like_one_thread():
    labels, p = _inputs(4, 8, 3, 6, 6)
    p[5, labels[5, 2, 2], 2, 2] = np.nan  # the label's probability: checked at every pixel
    errors = []
    for jobs in (1, 2):
        with pytest.raises(ValueError) as e:
            get_label_quality_scores(labels, p, verbose=False, n_jobs=jobs, batch_size=3 * 36)
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "image 5" in errors[0]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_n_jobs_must_be_a_positive_int(bad):
    labels, p = _inputs(5, 2, 3, 4, 4)
    with pytest.raises(ValueError, match="n_jobs: expected None or an int >= 1"):
        get_label_quality_scores(labels, p, verbose=False, n_jobs=bad)
