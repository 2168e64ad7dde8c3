"""The fused MDSA passes on torch's OpenMP threads (surprise._omp, _fused_parallel) against plain numpy."""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from blindspots.surprise import _fused_parallel as passes
from blindspots.surprise.fused import axis_sources, fused_argmax_mdsa_map, fused_mdsa_map
from test_surprise_fused import direct, fitted

torch.set_num_threads(1)


@contextlib.contextmanager
def torch_threads(n):
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def numpy_marks(pred, lut, y0, y1, x0, x1, k, h0, w0):
    """mark uint8 [K, n, h0, w0] by brute force: bit 1 on the four cells a pixel reads, bit 2 on its base cell."""
    n, h, w = pred.shape
    mark = np.zeros((k, n, h0, w0), dtype=np.uint8)
    i, y, x = np.meshgrid(np.arange(n), np.arange(h), np.arange(w), indexing="ij")
    s = np.where((pred >= 0) & (pred < lut.size), lut[np.clip(pred, 0, lut.size - 1)], -1)
    ok = s >= 0
    i, y, x, s = i[ok], y[ok], x[ok], s[ok]
    for rows, cols in ((y0, x0), (y0, x1), (y1, x0), (y1, x1)):
        mark[s, i, rows[y], cols[x]] |= 1
    mark[s, i, y0[y], x0[x]] |= 2
    return mark


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mode,align", [("bilinear", False), ("bilinear", True), ("nearest", False)])
def test_mark_and_counts_equal_numpy(threads, mode, align):
    rng = np.random.default_rng(3)
    n, h, w, h0, w0 = 3, 19, 26, 5, 7
    pred = rng.integers(-1, 7, (n, h, w))
    lut = np.array([0, -1, 1, 2, -1, 3], dtype=np.int64)  # ids 6 and -1: no model
    y0, y1, _ = axis_sources(h, h0, mode, align)
    x0, x1, _ = axis_sources(w, w0, mode, align)
    mark = np.zeros((4, n, h0, w0), dtype=np.uint8)
    counts = np.zeros((4, n), dtype=np.int64)
    span = np.empty((n, 2), dtype=np.int64)
    passes.mark(pred, lut, y0, y1, x0, x1, mark, counts, span, threads=threads)
    ref = numpy_marks(pred, lut, y0, y1, x0, x1, 4, h0, w0)
    np.testing.assert_array_equal(mark, ref)
    np.testing.assert_array_equal(counts, np.count_nonzero(ref, axis=(2, 3)))
    np.testing.assert_array_equal(span, np.stack([pred.min(axis=(1, 2)), pred.max(axis=(1, 2))], axis=1))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("mode,align", [("bilinear", False), ("nearest", False)])
def test_argmax_in_marking_pass_equals_argmax_then_map(channels_last, mode, align):
    est = fitted(classes=(0, 1, 2, 3))
    rng = np.random.default_rng(5)
    feats = torch.from_numpy(rng.normal(size=(3, 6, 5, 7)).astype(np.float32))
    scores = torch.from_numpy(np.round(rng.normal(size=(3, 6, 23, 30))).astype(np.float32))  # ties
    if channels_last:
        scores = scores.contiguous(memory_format=torch.channels_last)
    out, pred_out = np.empty((3, 23, 30), np.float32), np.empty((3, 23, 30), np.int64)
    sa, pred = fused_argmax_mdsa_map(est, feats, scores, mode=mode, align_corners=align, num_classes=6,
                                     out=out, pred_out=pred_out)
    assert sa is out and pred is pred_out
    np.testing.assert_array_equal(pred, scores.argmax(dim=1).numpy())
    np.testing.assert_array_equal(sa, fused_mdsa_map(est, feats, pred, mode=mode, align_corners=align))
    np.testing.assert_allclose(sa, direct(est, feats, pred, mode, align), rtol=2e-4, atol=2e-4)
    with pytest.raises(ValueError, match="pred_out"):
        fused_argmax_mdsa_map(est, feats, scores, pred_out=np.empty((3, 23, 30), np.int32))
    with pytest.raises(ValueError, match="scores"):
        fused_argmax_mdsa_map(est, feats, scores.double())


def test_two_threads_equal_one_thread_bit_for_bit():
    """Images are independent chunks: torch's two OpenMP threads give the one-thread maps exactly."""
    est = fitted()
    rng = np.random.default_rng(9)
    feats = torch.from_numpy(rng.normal(size=(5, 6, 6, 6)).astype(np.float32))
    scores = torch.from_numpy(rng.normal(size=(5, 5, 31, 29)).astype(np.float32))
    ref = fused_argmax_mdsa_map(est, feats, scores)
    with torch_threads(2):
        got = fused_argmax_mdsa_map(est, feats, scores)
        assert torch.get_num_threads() == 2
    np.testing.assert_array_equal(got[0], ref[0])
    np.testing.assert_array_equal(got[1], ref[1])


def test_without_torch_libgomp_or_mkl_same_maps(monkeypatch):
    """The calling-thread fallback (no libgomp of torch's) and the pass-by-pass path (no MKL sgemm_) give
    the maps of the one-call-per-image path."""
    from blindspots.surprise import _omp

    est = fitted()
    rng = np.random.default_rng(11)
    feats = torch.from_numpy(rng.normal(size=(4, 6, 5, 7)).astype(np.float32))
    scores = torch.from_numpy(rng.normal(size=(4, 5, 23, 30)).astype(np.float32))
    ref = fused_argmax_mdsa_map(est, feats, scores)
    with torch_threads(2):
        monkeypatch.setattr(_omp, "_gomp_parallel", lambda: None)
        serial = fused_argmax_mdsa_map(est, feats, scores)
        monkeypatch.setattr(_omp, "blas_address", lambda: 0)
        passes_ = fused_argmax_mdsa_map(est, feats, scores)
    np.testing.assert_array_equal(serial[0], ref[0])
    np.testing.assert_array_equal(serial[1], ref[1])
    np.testing.assert_allclose(passes_[0], ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(passes_[1], ref[1])


def test_sgemm_sizes_past_int32_take_the_torch_path(monkeypatch):
    """MKL's sgemm_ takes int32 sizes: where a size would not fit, the map is whitened by torch.mm instead
    (the pass-by-pass path), with the same maps."""
    from blindspots.surprise import _fused_parallel, _omp

    assert _omp.sgemm_fits(2**31 - 1, 64, 16) and not _omp.sgemm_fits(2**31, 64, 16)
    est = fitted()
    rng = np.random.default_rng(13)
    feats = torch.from_numpy(rng.normal(size=(2, 6, 5, 7)).astype(np.float32))
    scores = torch.from_numpy(rng.normal(size=(2, 5, 23, 30)).astype(np.float32))
    ref = fused_argmax_mdsa_map(est, feats, scores)
    one_call = []
    monkeypatch.setattr(_fused_parallel, "image_mdsa", lambda *a, **kw: one_call.append(1))
    monkeypatch.setattr(_omp, "SGEMM_MAX", 34)  # 5 x 7 = 35 cells per image: one past it
    got = fused_argmax_mdsa_map(est, feats, scores)
    assert not one_call
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[1], ref[1])


def test_rows_past_int32_refused_before_any_allocation():
    """Rows of marked cells are numbered in int32: a call with more (class, image, cell) triples is refused,
    naming features (a zero-stride view: no memory behind its 46341 x 46341 cells)."""
    est = fitted()
    feats = torch.zeros(1, 6, 1, 1).expand(1, 6, 46341, 46341)
    with pytest.raises(ValueError, match=r"features: expected at most 2147483647 .* 4 classes x 1 images"):
        fused_mdsa_map(est, feats, np.zeros((1, 8, 8), dtype=np.int64))
