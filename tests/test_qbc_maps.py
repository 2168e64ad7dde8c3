"""QBC's vote entropy from hard argmax maps (a scan folder's saved maps) against the direct formula."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from blindspots.mine.samplers.qbc import committee_disagreement
from blindspots.mine.model_columns.qbc_maps import committee_names, vote_entropy


def direct(maps: np.ndarray) -> np.ndarray:
    """-sum_c V(c)/M log(V(c)/M) per pixel, a loop over pixels and classes, averaged per image."""
    m, n, h, w = maps.shape
    out = np.zeros(n)
    for i in range(n):
        for y in range(h):
            for x in range(w):
                _, counts = np.unique(maps[:, i, y, x], return_counts=True)
                share = counts / m
                out[i] -= (share * np.log(share)).sum() / (h * w)
    return out


def test_vote_entropy_by_hand():
    # 3 members, one image of 2 pixels: all agree (0), then votes 2:1 (-(2/3 log 2/3 + 1/3 log 1/3))
    maps = np.array([[[[0, 1]]], [[[0, 1]]], [[[0, 2]]]])
    h21 = -(2 / 3 * np.log(2 / 3) + 1 / 3 * np.log(1 / 3))
    np.testing.assert_allclose(vote_entropy(maps), [h21 / 2])
    # every member votes differently: log M at every pixel
    np.testing.assert_allclose(vote_entropy(np.array([[[[0]]], [[[1]]], [[[2]]], [[[3]]]])), [np.log(4)])


def test_vote_entropy_matches_the_direct_formula_and_the_probability_path():
    rng = np.random.default_rng(0)
    maps = rng.integers(0, 4, (4, 3, 5, 6))
    np.testing.assert_allclose(vote_entropy(maps), direct(maps), rtol=1e-12)
    onehot = np.moveaxis(np.eye(4)[maps], -1, 2)  # [M, n, C, H, W]: the columns' path from probabilities
    np.testing.assert_allclose(vote_entropy(maps), committee_disagreement(onehot)[0], rtol=1e-12)


def test_vote_entropy_refuses_bad_maps():
    with pytest.raises(ValueError, match=r"maps: expected M >= 2 members' integer class maps"):
        vote_entropy(np.zeros((1, 2, 3, 3), int))
    with pytest.raises(ValueError, match=r"maps: expected .* got float64"):
        vote_entropy(np.zeros((2, 2, 3, 3)))


def test_committee_is_the_target_and_its_compared_competitors():
    cols = ["id", "dpa__t__a", "dmiou__t__a", "dpa__t__b", "dpa__u__c"]
    assert committee_names(cols, "t") == ["t", "a", "b"]
    with pytest.raises(ValueError, match=r"target: expected a scan that compared 'c'"):
        committee_names(pd.Index(cols), "c")
