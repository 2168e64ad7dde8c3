"""Tiny torch models for the surprise tests (and tests of the trace extractor on them)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from blindspots.models.adapters import TorchClassifier, TorchSegmenter
from blindspots.surprise.traces import TraceExtractor

torch.set_num_threads(1)


class TinySeg(torch.nn.Module):
    """Two stride-2 convs (features at 1/4 resolution, d channels) and a 1x1 classifier, upsampled in forward."""

    def __init__(self, num_classes: int = 3, d: int = 8, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.backbone = torch.nn.Sequential(
            torch.nn.Conv2d(3, d, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(d, d, 3, stride=2, padding=1), torch.nn.ReLU())
        self.classifier = torch.nn.Conv2d(d, num_classes, 1)
        self.aux_classifier = torch.nn.Conv2d(d, num_classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.backbone(x)
        self.aux_classifier(f)
        return F.interpolate(self.classifier(f), size=x.shape[-2:], mode="bilinear", align_corners=False)


class TinyCls(torch.nn.Module):
    def __init__(self, num_classes: int = 3, d: int = 6, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.conv = torch.nn.Conv2d(3, d, 3, padding=1)
        self.fc = torch.nn.Linear(d, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).mean(dim=(2, 3)))


def seg_model(num_classes: int = 3, d: int = 8, batch_size: int = 4) -> TorchSegmenter:
    return TorchSegmenter(TinySeg(num_classes, d), num_classes, batch_size=batch_size)


def images(n: int, size: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def test_default_layer_is_classifier_input_not_aux():
    ex = TraceExtractor(seg_model())
    assert ex.layer == "classifier@input"


def test_segmentation_traces_are_upsampled_features():
    model = seg_model(d=8)
    ex = TraceExtractor(model)
    imgs = images(3)
    traces, proba = ex.extract(imgs)
    assert traces.shape == (3, 8, 32, 32) and proba.shape == (3, 3, 32, 32)
    np.testing.assert_allclose(proba, model.predict_proba(imgs), atol=1e-5)
    with torch.no_grad():
        feat = model.module.backbone(model.preprocess(imgs))
        ref = F.interpolate(feat, size=(32, 32), mode="bilinear", align_corners=False).numpy()
        # the classifier applied to the traces gives the model's own (upsampled) logits: Figure 4
        logits = torch.einsum("nchw,kc->nkhw", torch.from_numpy(traces), model.module.classifier.weight[:, :, 0, 0])
        logits = logits + model.module.classifier.bias[None, :, None, None]
    np.testing.assert_allclose(traces, ref, atol=1e-5)
    np.testing.assert_allclose(torch.softmax(logits, 1).numpy(), proba, atol=1e-4)


def test_pixel_traces_match_full_map():
    ex = TraceExtractor(seg_model())
    imgs = images(2)
    full, _ = ex.extract(imgs)
    feat, _ = ex.forward(imgs)
    idx = np.array([0, 5, 100, 1023])
    got = ex.pixel_traces(feat[1], (32, 32), idx)
    np.testing.assert_allclose(got, full[1].reshape(8, -1)[:, idx].T, atol=1e-6)


def test_named_layer_and_classification_mean():
    clf = TorchClassifier(TinyCls(), 3)
    ex = TraceExtractor(clf, layer="conv")
    traces, proba = ex.extract(images(4))
    assert traces.shape == (4, 6) and proba.shape == (4, 3)
    with torch.no_grad():
        ref = clf.module.conv(clf.preprocess(images(4))).mean(dim=(2, 3)).numpy()
    np.testing.assert_allclose(traces, ref, atol=1e-5)
    assert TraceExtractor(clf).layer == "fc@input"


def test_bad_models_and_layers():
    with pytest.raises(ValueError, match="model"):
        TraceExtractor(lambda x: x)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="layer"):
        TraceExtractor(seg_model(), layer="nope")
    with pytest.raises(ValueError, match="interpolation"):
        TraceExtractor(seg_model(), interpolation="area")
    with pytest.raises(ValueError, match="feature map"):
        TraceExtractor(TorchSegmenter(TinyCls(), 3), layer="fc").forward(images(1))
