"""The compiled statistics (`scan.stats.model_stats`) give the same bits as plain numpy reductions:
argmax (first maximum on ties), class fractions, mean entropy and mean max probability."""
from __future__ import annotations

import numpy as np
import pytest

from blindspots.scan.stats import ENTROPY_EPS, model_stats


def _reference(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The numpy definition, per image: p float32 [N, C, H, W] -> argmax, frac, entropy, maxprob."""
    n, c, h, w = p.shape
    arg = np.argmax(p, axis=1).astype(np.uint8 if c <= 256 else np.int32)
    frac = np.stack([np.bincount(a.ravel(), minlength=c) for a in arg]) / float(h * w)
    ent = np.empty(n, np.float32)
    for i in range(n):
        plogp = np.log(p[i] + ENTROPY_EPS) * p[i]
        s = plogp[0].copy()
        for k in range(1, c):  # channel order per pixel
            s += plogp[k]
        ent[i] = -s.mean()
    return arg, frac.astype(np.float32), ent, p.max(axis=1).mean(axis=(1, 2), dtype=np.float32)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return (e / e.sum(axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("c", [1, 2, 8, 19, 300])
@pytest.mark.parametrize("shape", [(1, 2, 3), (2, 7, 13), (3, 33, 65), (1, 130, 129)])
def test_model_stats_equals_numpy(c: int, shape: tuple[int, int, int]) -> None:
    n, h, w = shape
    if c == 300 and h * w > 5000:
        pytest.skip("the int32 case (C > 256) on the small shapes only")
    rng = np.random.default_rng(c * 1000 + h)
    p = _softmax(rng.normal(size=(n, c, h, w)) * 3)
    ties = (np.round(p * 4) / 4).astype(np.float32)  # many equal maxima: the first one wins
    for x in (p, ties):
        st = model_stats(x)
        arg, frac, ent, maxp = _reference(x)
        assert st.argmax.dtype == arg.dtype and np.array_equal(st.argmax, arg)
        assert np.array_equal(st.frac, frac)
        assert np.array_equal(st.entropy, ent)
        assert np.array_equal(st.maxprob, maxp)


def test_model_stats_blocks_and_one_pixel() -> None:
    """Images larger than one block, one-hot outputs, a 1 x 1 image and a non-contiguous input."""
    rng = np.random.default_rng(1)
    p = _softmax(rng.normal(size=(1, 3, 200, 150)))  # 30,000 pixels: two blocks
    onehot = np.zeros((2, 4, 5, 6), np.float32)
    onehot[:, 2] = 1
    for x in (p, onehot, p[:, :, ::2, ::3]):
        st = model_stats(x)
        arg, frac, ent, maxp = _reference(np.ascontiguousarray(x))
        assert np.array_equal(st.argmax, arg) and np.array_equal(st.frac, frac)
        assert np.array_equal(st.entropy, ent) and np.array_equal(st.maxprob, maxp)
    one = _softmax(rng.normal(size=(1, 8, 1, 1)))
    st = model_stats(one)
    assert st.argmax[0, 0, 0] == np.argmax(one[0, :, 0, 0]) and st.frac[0].sum() == 1
    assert np.isclose(st.entropy[0], -(one * np.log(one)).sum(), rtol=1e-6)
