"""Fused per-pixel MDSA (surprise.fused) against upsample-then-score, on every table path, and the fast argmax."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

from blindspots.surprise import MDSA
from blindspots.surprise.fused import fused_mdsa_map
from blindspots.surprise.traces import argmax_classes

torch.set_num_threads(1)


def fitted(d=6, classes=(0, 1, 2, 3), seed=0):
    rng = np.random.default_rng(seed)
    y = np.repeat(np.array(classes), 60)
    x = rng.normal(size=(y.size, d)) + y[:, None] * 0.5
    x[:, 1] += 0.7 * x[:, 0]
    return MDSA().fit(x.astype(np.float32), y)


def direct(est, feats, pred, mode, align):
    """Upsample the features as F.interpolate does, then score every pixel under its class (NaN: no model)."""
    kwargs = {"align_corners": align} if mode == "bilinear" else {}
    up = F.interpolate(feats, size=pred.shape[1:], mode=mode, **kwargs)
    traces = up.permute(0, 2, 3, 1).reshape(-1, feats.shape[1]).numpy()
    cls = pred.reshape(-1)
    out = np.full(cls.size, np.nan)
    ok = np.isin(cls, est.classes_)
    if ok.any():
        out[ok] = est.score(traces[ok], cls[ok])
    return out.reshape(pred.shape)


def case(seed=0, n=3, d=6, h0=5, w0=7, size=(23, 30), k=6, blocky=True):
    rng = np.random.default_rng(seed)
    feats = torch.from_numpy(rng.normal(size=(n, d, h0, w0)).astype(np.float32))
    if blocky:  # class regions, so some classes read few low-resolution cells
        low = rng.integers(0, k, (n, 3, 3))
        pred = np.kron(low, np.ones((1, size[0] // 3 + 1, size[1] // 3 + 1), dtype=np.int64))[:, :size[0], :size[1]]
    else:
        pred = rng.integers(0, k, (n, *size))
    return feats, pred


@pytest.mark.parametrize("mode,align", [("bilinear", False), ("bilinear", True), ("nearest", False)])
def test_fused_equals_upsample_then_score(mode, align):
    est = fitted()  # classes 0..3 modelled; 4, 5 predicted but without a model -> NaN
    for seed, blocky in ((0, True), (1, False)):
        feats, pred = case(seed, blocky=blocky)
        got = fused_mdsa_map(est, feats, pred, mode=mode, align_corners=align)
        ref = direct(est, feats, pred, mode, align)
        assert got.dtype == np.float32 and got.shape == pred.shape
        np.testing.assert_array_equal(np.isnan(got), ~np.isin(pred, est.classes_))
        np.testing.assert_allclose(got, ref, rtol=2e-4, atol=2e-4)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), h0=st.integers(1, 6), w0=st.integers(1, 6), h=st.integers(1, 20),
       w=st.integers(1, 20), mode=st.sampled_from(["bilinear", "nearest"]), align=st.booleans(),
       blocky=st.booleans())
def test_fused_any_scale_up_or_down(seed, h0, w0, h, w, mode, align, blocky):
    est = fitted(d=3, classes=(0, 2))
    rng = np.random.default_rng(seed)
    feats = torch.from_numpy(rng.normal(size=(2, 3, h0, w0)).astype(np.float32))
    pred = rng.integers(0, 3, (2, h, w))  # class 1 has no model
    if blocky:  # one class per row band: tables are reused along rows, cells read by one class only
        pred = np.broadcast_to(rng.integers(0, 3, (2, h, 1)), (2, h, w)).copy()
    got = fused_mdsa_map(est, feats, pred, mode=mode, align_corners=align)
    np.testing.assert_allclose(got, direct(est, feats, pred, mode, align), rtol=2e-4, atol=2e-4)


def test_torch_pred_num_classes_and_kept_features():
    rng = np.random.default_rng(3)
    x = rng.normal(size=(300, 5)).astype(np.float32)
    x[:, 2] = 1.0  # dropped by the variance filter: the fused path must drop it too
    y = np.repeat([0, 1, 2], 100)
    est = MDSA().fit(x, y)
    assert est.kept_features_.tolist() == [0, 1, 3, 4]
    feats, pred = case(4, n=2, d=5, k=3)
    a = fused_mdsa_map(est, feats, torch.from_numpy(pred), num_classes=3)
    b = fused_mdsa_map(est, feats, pred.astype(np.int32))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(a, direct(est, feats, pred, "bilinear", False), rtol=2e-4, atol=2e-4)


def test_no_modelled_class_is_all_nan_and_bad_inputs_raise():
    est = fitted(classes=(0, 1))
    feats, pred = case(5, n=2, k=2)
    assert np.isnan(fused_mdsa_map(est, feats, pred + 2)).all()
    with pytest.raises(ValueError, match="pred: expected non-negative"):
        fused_mdsa_map(est, feats, pred - 1)
    with pytest.raises(ValueError, match="pred: expected class ids"):
        fused_mdsa_map(est, feats, pred + 5, num_classes=2)
    with pytest.raises(ValueError, match="pred: expected class ids"):
        fused_mdsa_map(est, feats, pred - 3, num_classes=2)  # negative ids with a stated class count
    with pytest.raises(ValueError, match="pred: expected int"):
        fused_mdsa_map(est, feats, pred.astype(np.float32))
    with pytest.raises(ValueError, match="features"):
        fused_mdsa_map(est, feats[:1], pred)
    with pytest.raises(ValueError, match="features: expected float32 \\[2, 6"):  # d differs from the fit's
        fused_mdsa_map(est, feats[:, :4], pred)
    with pytest.raises(ValueError, match="mode"):
        fused_mdsa_map(est, feats, pred, mode="bicubic")


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), c=st.integers(1, 9), ties=st.booleans(), nans=st.booleans(),
       channels_last=st.booleans())
def test_argmax_classes_equals_torch_argmax(seed, c, ties, nans, channels_last):
    rng = np.random.default_rng(seed)
    y = rng.normal(size=(2, c, 5, 6)).astype(np.float32)
    if ties:  # few distinct values: many exact ties, the first maximal class must win
        y = np.round(y)
    if nans:  # torch.argmax takes the first NaN
        y[rng.random(y.shape) < 0.2] = np.nan
    y_t = torch.from_numpy(y)
    if channels_last:  # some layers hand over NHWC-strided maps
        y_t = y_t.contiguous(memory_format=torch.channels_last)
    assert torch.equal(argmax_classes(y_t), y_t.argmax(dim=1))
    flat = torch.from_numpy(y[:, :, 0, 0])  # [n, C]: classification outputs
    assert torch.equal(argmax_classes(flat), flat.argmax(dim=1))


def test_whitening_on_two_threads_equals_one_thread():
    """The marked cells' whitening on torch's two threads gives the one-thread map; the thread count stays."""
    est = fitted()
    feats, pred = case(0, blocky=False)
    ref = fused_mdsa_map(est, feats, pred)
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        got = fused_mdsa_map(est, feats, pred)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(old)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("mode,align", [("bilinear", False), ("nearest", False)])
def test_two_threads_give_the_one_thread_maps(mode, align):
    """Images are independent: the passes spread over numba's prange on two threads give the maps of one
    thread bit for bit, from argmax maps and from scores (the argmax taken in the marking pass)."""
    from blindspots.surprise.fused import fused_argmax_mdsa_map
    from blindspots.surprise.traces import argmax_classes

    est = fitted()
    feats, pred = case(2, n=4, blocky=False)
    scores = torch.from_numpy(np.random.default_rng(3).normal(size=(4, 6, *pred.shape[1:])).astype(np.float32))
    old = torch.get_num_threads()
    got = {}
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            got[threads] = (fused_mdsa_map(est, feats, pred, mode=mode, align_corners=align),
                            *fused_argmax_mdsa_map(est, feats, scores, mode=mode, align_corners=align))
            assert torch.get_num_threads() == threads
    finally:
        torch.set_num_threads(old)
    for a, b in zip(got[1], got[2]):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(got[2][2], argmax_classes(scores).numpy())
    via_pred = fused_mdsa_map(est, feats, got[2][2], mode=mode, align_corners=align)
    np.testing.assert_array_equal(got[2][1], via_pred)
