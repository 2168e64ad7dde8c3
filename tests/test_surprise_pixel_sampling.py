"""Pixel sampler: per-class caps, determinism, ignore index."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from blindspots.surprise.pixel_sampling import cap_per_class, choose_images, sample_pixels


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 1000), per_class=st.integers(1, 50), size=st.integers(4, 24))
def test_sample_pixels_caps_each_class_and_is_seeded(seed, per_class, size):
    mask = np.random.default_rng(seed).integers(0, 4, (size, size)).astype(np.uint8)
    mask[0, 0] = 255
    idx, cls = sample_pixels(mask, per_class, np.random.default_rng(seed))
    flat = mask.ravel()
    assert np.array_equal(flat[idx], cls)             # every pixel really has its class
    assert 255 not in cls
    for c in range(4):
        assert (cls == c).sum() == min(per_class, (flat == c).sum())
    assert len(np.unique(idx)) == idx.size             # no pixel twice
    idx2, _ = sample_pixels(mask, per_class, np.random.default_rng(seed))
    assert np.array_equal(idx, idx2)


def test_all_pixels_when_per_class_none():
    mask = np.array([[0, 1], [2, 255]])
    idx, cls = sample_pixels(mask, None, np.random.default_rng(0))
    assert sorted(idx.tolist()) == [0, 1, 2] and sorted(cls.tolist()) == [0, 1, 2]
    idx, _ = sample_pixels(mask, None, np.random.default_rng(0), num_classes=2)
    assert sorted(idx.tolist()) == [0, 1]


def test_cap_and_choose():
    labels = np.repeat([0, 1, 2], [5, 50, 1])
    keep = cap_per_class(labels, 10, np.random.default_rng(0))
    assert np.bincount(labels[keep]).tolist() == [5, 10, 1]
    assert choose_images(100, 10, np.random.default_rng(0)).size == 10
    assert choose_images(5, 10, np.random.default_rng(0)).tolist() == [0, 1, 2, 3, 4]


def test_bad_inputs():
    with pytest.raises(ValueError, match="mask"):
        sample_pixels(np.zeros(4, int), 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="mask"):
        sample_pixels(np.zeros((2, 2)), 1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="per_class"):
        sample_pixels(np.zeros((2, 2), int), 0, np.random.default_rng(0))
    with pytest.raises(ValueError, match="cap"):
        cap_per_class(np.zeros(3, int), 0, np.random.default_rng(0))
