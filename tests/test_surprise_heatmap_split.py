"""Heatmaps whose argmax and fused MDSA are split over images on two threads equal the one-thread maps."""
from __future__ import annotations

import numpy as np
import torch

from blindspots.surprise import MDSA, TraceExtractor, collect_fit_traces
from blindspots.surprise.fused import fused_mdsa_map
from blindspots.surprise.image import surprise_heatmaps
from blindspots.surprise.traces import argmax_classes
from test_surprise_image import labelled
from test_surprise_models import images, seg_model


def test_two_thread_split_equals_one_thread_and_the_fused_map():
    ex = TraceExtractor(seg_model(d=8))
    x, y = collect_fit_traces(ex, labelled(), per_class=40, cap=100, seed=0, progress=False)
    est = MDSA().fit(x, y)
    imgs = images(5, seed=3)  # an odd count: parts of 3 and 2 images
    old = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        sa1, pred1 = surprise_heatmaps(ex, est, imgs)
        torch.set_num_threads(2)
        sa2, pred2 = surprise_heatmaps(ex, est, imgs)
        assert torch.get_num_threads() == 2  # restored after the split
    finally:
        torch.set_num_threads(old)
    np.testing.assert_array_equal(pred2, pred1)
    np.testing.assert_allclose(sa2, sa1, rtol=1e-6, atol=1e-6)
    feat, out, _ = ex.forward_output(imgs)
    pred = argmax_classes(out)
    np.testing.assert_array_equal(pred.numpy(), pred1)
    np.testing.assert_allclose(fused_mdsa_map(est, feat, pred, num_classes=ex.num_classes), sa1, rtol=1e-6, atol=1e-6)
