"""Per-pixel MDSA in torch ops on the forward's device (surprise.device) against the CPU fused map.

Run here on CPU tensors (the same torch ops a GPU runs); tests/test_gpu.py runs it on CUDA."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from blindspots.surprise.device import device_mdsa_map
from blindspots.surprise.fused import fused_mdsa_map
from test_surprise_fused import case, fitted

torch.set_num_threads(1)


@pytest.mark.parametrize("mode,align", [("bilinear", False), ("bilinear", True), ("nearest", False)])
@pytest.mark.parametrize("chunk", [7, 1 << 16])
def test_device_map_equals_the_cpu_fused_map(mode, align, chunk):
    est = fitted()  # classes 0..3 modelled; 4, 5 predicted without a model -> NaN
    for seed, blocky in ((0, True), (1, False)):
        feats, pred = case(seed, blocky=blocky)
        ref = fused_mdsa_map(est, feats, pred, mode=mode, align_corners=align)
        got = device_mdsa_map(est, feats, torch.from_numpy(pred), mode=mode, align_corners=align, chunk_cells=chunk)
        assert got.dtype == torch.float32 and tuple(got.shape) == pred.shape
        np.testing.assert_array_equal(np.isnan(got.numpy()), np.isnan(ref))
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_device_map_refuses_bad_inputs_and_follows_a_refit():
    est = fitted()
    feats, pred = case(0)
    with pytest.raises(ValueError, match="mode: expected"):
        device_mdsa_map(est, feats, torch.from_numpy(pred), mode="bicubic")
    with pytest.raises(ValueError, match="features: expected float32 \\[n, 6"):
        device_mdsa_map(est, feats[:, :4], torch.from_numpy(pred))
    with pytest.raises(ValueError, match="pred: expected int argmax maps"):
        device_mdsa_map(est, feats, torch.from_numpy(pred).float())
    first = device_mdsa_map(est, feats, torch.from_numpy(pred))
    est.fit(np.random.default_rng(5).normal(size=(240, 6)).astype(np.float32), np.repeat(np.arange(4), 60))
    again = device_mdsa_map(est, feats, torch.from_numpy(pred))
    np.testing.assert_allclose(again.numpy(), fused_mdsa_map(est, feats, pred), rtol=1e-4, atol=1e-5)
    assert not torch.allclose(torch.nan_to_num(first), torch.nan_to_num(again))  # the new fit's matrices were used
