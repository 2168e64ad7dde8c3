"""Ranking stability (MAD Appendix C): SRCC of top-k mIoU rankings against the ranking on all of T."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots.report.viewmodels.ranking import topk_srcc


def diag(n_right: int, n_wrong: int) -> np.ndarray:
    """A 2-class confusion matrix with n_right correct pixels of each class and n_wrong swapped."""
    return np.array([[n_right, n_wrong], [n_wrong, n_right]])


def test_topk_srcc_against_the_largest_k():
    # models a > b > c on every image: the ranking never changes, SRCC 1 for every k
    same = {m: np.stack([diag(10 - w, w)] * 4) for m, w in (("a", 1), ("b", 2), ("c", 3))}
    frame = topk_srcc(same)
    assert list(frame["k"]) == [2, 3, 4] and np.allclose(frame["srcc"], 1.0)
    # c is best on the first (lowest-MOS) image only, worst on the rest: the order flips at small k
    flip = {"a": np.stack([diag(8, 2)] * 4), "b": np.stack([diag(7, 3)] * 4),
            "c": np.stack([diag(10, 0)] + [diag(2, 8)] * 3)}
    frame = topk_srcc(flip, k_min=1)
    assert frame["srcc"].iloc[0] == pytest.approx(-0.5) and frame["srcc"].iloc[-1] == pytest.approx(1.0)
    ties = topk_srcc({"a": np.stack([diag(5, 5)] * 2), "b": np.stack([diag(5, 5)] * 2)})
    assert np.isnan(ties["srcc"]).all()  # all ties: no ranking to correlate, not a made-up number
    with pytest.raises(ValueError, match="confusions"):
        topk_srcc({"a": np.stack([diag(1, 1)])})
    with pytest.raises(ValueError, match="k_min"):
        topk_srcc(same, k_min=9)
