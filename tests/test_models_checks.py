"""The cheap output checks (one sum for finiteness, one class-axis sum for probabilities) still catch
every bad output, one bad pixel is enough; the blocked scan statistics give the same bits as the
whole-array formulas."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from blindspots.models.adapters import CallableSegmenter
from blindspots.scan import stats

C, N, H, W = 4, 2, 12, 20


def _proba(seed: int = 0) -> np.ndarray:
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal((N, C, H, W), dtype=np.float32))
    return torch.softmax(x, dim=1).numpy()


def _one_bad(kind: str) -> np.ndarray:
    p = _proba()
    if kind == "nan":
        p[1, 2, 11, 19] = np.nan
    elif kind == "inf":
        p[0, 0, 5, 7] = np.inf
    elif kind == "negative":  # sums stay 1: only the range check sees it
        p[1, :, 3, 4] = [-0.5, 1.5, 0.0, 0.0]
    elif kind == "sum":
        p[0, 1, 0, 0] += 0.01
    return p


@pytest.mark.parametrize("kind, match", [
    ("nan", r"expected finite values, got 1 NaN/inf"),
    ("inf", r"expected finite values, got 1 NaN/inf"),
    ("negative", r"expected probabilities in \[0, 1\]"),
    ("sum", r"expected probabilities summing to 1"),
])
def test_one_bad_pixel_is_caught(kind, match):
    bad = _one_bad(kind)
    seg = CallableSegmenter(lambda b: bad[:len(b)], C, output="probabilities")
    with pytest.raises(ValueError, match=match):
        seg.predict_proba(np.zeros((N, H, W, 3), np.uint8))


def test_bad_logits_and_binary_outputs_are_caught():
    images = np.zeros((N, H, W, 3), np.uint8)
    logits = np.zeros((N, C, H, W), np.float32)
    logits[1, 3, 2, 2] = -np.inf
    with pytest.raises(ValueError, match="expected finite values, got 1 NaN/inf"):
        CallableSegmenter(lambda b: logits, C, output="logits").predict_proba(images)
    one = np.full((N, 1, H, W), 0.3, np.float32)
    one[0, 0, 4, 4] = np.nan  # one channel: p of the positive class, checked before [1 - p, p]
    with pytest.raises(ValueError, match="expected finite values, got 1 NaN/inf"):
        CallableSegmenter(lambda b: one, 2, output="probabilities").predict_proba(images)
    good = CallableSegmenter(lambda b: _proba()[:len(b)], C, output="probabilities").predict_proba(images)
    np.testing.assert_array_equal(good, _proba())


def _reference(p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The whole-array formulas the blocked statistics replace (argmax, frac, entropy, maxprob)."""
    n, c, h, w = p.shape
    idx = np.argmax(p, axis=1).astype(np.uint8)
    counts = np.stack([np.bincount(m.ravel(), minlength=c) for m in idx])
    entropy = np.empty(n, np.float32)
    for i in range(n):
        buf = np.log(p[i] + stats.ENTROPY_EPS) * p[i]
        entropy[i] = -buf.sum(axis=0).mean()
    return idx, (counts / float(h * w)).astype(np.float32), entropy, p.max(axis=1).mean(axis=(1, 2), dtype=np.float32)


@pytest.mark.parametrize("block", [7, 40, 1 << 14])  # rows split into blocks (a partial last one), or whole
def test_blocked_stats_same_bits(monkeypatch, block):
    monkeypatch.setattr(stats, "BLOCK_PIXELS", block)
    p = _proba(1)
    p[0, :, 0, 0] = 0.25  # a tie: the first maximum wins, as np.argmax
    p[1, :, 1, 1] = [0.0, 1.0, 0.0, 0.0]  # zeros: p log(p + eps) is 0
    got = stats.model_stats(p)
    for a, b in zip((got.argmax, got.frac, got.entropy, got.maxprob), _reference(p)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
