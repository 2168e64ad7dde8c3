"""Surprise for any model: ONNX intermediate outputs, callable and precomputed features give
the SAME traces and SA as the torch hook on the same model; binary one-channel models get real probabilities."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from PIL import Image
from typer.testing import CliRunner

from blindspots.ids import artifact_name
from blindspots.models.adapters import (CallableFeatures, OnnxSegmenter, PrecomputedFeatures, PrecomputedSegmenter,
                                        TorchSegmenter, TorchScriptSegmenter, export_onnx)
from blindspots.surprise import DSA, LSA, MDSA, TraceExtractor, class_surprise, collect_fit_traces, surprise_heatmaps

torch.set_num_threads(1)

LAYER = "backbone"  # torch: the module whose output is the feature map
ONNX_LAYER = "/module/backbone/backbone.3/Relu_output_0"  # the same tensor in the exported graph
TOL = dict(rtol=1e-4, atol=1e-5)  # onnxruntime and torch differ by float32 rounding only


class Net(torch.nn.Module):
    """Two stride-2 convs (features at 1/4 resolution) and a 1x1 classifier upsampled to the input."""

    def __init__(self, out_channels: int = 3, d: int = 6) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = torch.nn.Sequential(
            torch.nn.Conv2d(3, d, 3, stride=2, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(d, d, 3, stride=2, padding=1), torch.nn.ReLU())
        self.classifier = torch.nn.Conv2d(d, out_channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(self.classifier(self.backbone(x)), size=x.shape[-2:], mode="bilinear",
                             align_corners=False)


class Data:
    """A labelled set with ids: dataset[i] -> (image uint8 [32, 32, 3], mask int [32, 32])."""

    def __init__(self, n: int = 6, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        self.masks = (self.images[..., 0] // 86).astype(np.int64)
        self.ids = [f"sub/im{i}.jpg" for i in range(n)]

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.images[i], self.masks[i]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("any_model")
    net = Net().eval()
    seg = TorchSegmenter(net, 3, batch_size=4)
    onnx_path = export_onnx(net, root / "net.onnx", height=32, width=32)
    data = Data()
    feats = seg.features(data.images, LAYER)  # torch-hook features [N, d, 8, 8]
    logits = seg.forward_tensor(data.images).numpy()
    for i, image_id in enumerate(data.ids):
        for folder, arr in (("features", feats[i]), ("logits", logits[i])):
            path = root / folder / artifact_name(image_id, ".npy")
            path.parent.mkdir(parents=True, exist_ok=True)
            np.save(path, arr)
    return root, seg, onnx_path, data


def _extractors(setup):
    root, seg, onnx_path, data = setup
    onnx = OnnxSegmenter(onnx_path, 3, batch_size=4)
    return {
        "torch": TraceExtractor(seg, LAYER),
        "onnx": TraceExtractor(onnx, ONNX_LAYER),
        "precomputed features": TraceExtractor(seg, features=PrecomputedFeatures(root / "features")),
        "callable features, ONNX predictions": TraceExtractor(
            onnx, features=CallableFeatures(lambda imgs: seg.features(imgs, LAYER))),
        "all precomputed": TraceExtractor(PrecomputedSegmenter(root / "logits", 3, output="logits"),
                                          features=PrecomputedFeatures(root / "features")),
    }


def test_traces_and_surprise_equal_torch_path(setup):
    _, _, _, data = setup
    exs = _extractors(setup)
    ref = exs.pop("torch")
    x0, y0 = collect_fit_traces(ref, data, per_class=20, cap=None, progress=False)
    ests = {k: k().fit(x0, y0) for k in (MDSA, LSA, DSA)}
    ref_cs = {k: class_surprise(ref, est, data.images, per_class=50, ids=data.ids) for k, est in ests.items()}
    ref_map = surprise_heatmaps(ref, ests[MDSA], data.images, ids=data.ids)
    ref_feat, ref_proba = ref.extract(data.images, ids=data.ids)
    for name, ex in exs.items():
        x, y = collect_fit_traces(ex, data, per_class=20, cap=None, progress=False)
        np.testing.assert_array_equal(y, y0, err_msg=name)
        np.testing.assert_allclose(x, x0, **TOL, err_msg=name)
        feat, proba = ex.extract(data.images, ids=data.ids)
        np.testing.assert_allclose(feat, ref_feat, **TOL, err_msg=name)
        np.testing.assert_allclose(proba, ref_proba, **TOL, err_msg=name)
        for k, est in ests.items():
            cs = class_surprise(ex, est, data.images, per_class=50, ids=data.ids)
            np.testing.assert_array_equal(cs.pred, ref_cs[k].pred, err_msg=name)
            np.testing.assert_allclose(cs.class_sa, ref_cs[k].class_sa, rtol=1e-4, atol=1e-4, err_msg=f"{name} {k}")
        sa, pred = surprise_heatmaps(ex, ests[MDSA], data.images, ids=data.ids)
        np.testing.assert_array_equal(pred, ref_map[1], err_msg=name)
        np.testing.assert_allclose(sa, ref_map[0], rtol=1e-4, atol=1e-4, err_msg=name)


def test_onnx_features_method_equals_torch_hook(setup):
    _, seg, onnx_path, data = setup
    onnx = OnnxSegmenter(onnx_path, 3, batch_size=4)
    np.testing.assert_allclose(onnx.features(data.images, ONNX_LAYER), seg.features(data.images, LAYER), **TOL)
    # the scores output itself is a valid "layer" too (read from the main session)
    assert onnx.features(data.images[:1], "scores").shape == (1, 3, 32, 32)


def test_binary_one_channel_model_gets_probabilities(setup):
    net = Net(out_channels=1).eval()
    seg = TorchSegmenter(net, batch_size=4)  # one channel: a binary model, C = 2
    assert seg.num_classes == 2
    data = Data()
    ex = TraceExtractor(seg)
    assert ex.layer == "classifier@input"  # the one-channel head is found for a binary model
    feat, proba = ex.forward(data.images)
    np.testing.assert_allclose(proba, seg.predict_proba(data.images), rtol=1e-6, atol=1e-6)
    assert proba[:, 1].min() < 1.0 and proba[:, 0].max() > 0.0  # not probability 1.0 everywhere
    _, pred = ex.forward_pred(data.images)
    np.testing.assert_array_equal(pred.numpy(), proba.argmax(axis=1))


def test_errors_name_what_is_missing(setup, tmp_path):
    root, seg, onnx_path, data = setup
    onnx = OnnxSegmenter(onnx_path, 3)
    with pytest.raises(ValueError, match="layer: expected the name of an intermediate tensor"):
        TraceExtractor(onnx)
    with pytest.raises(ValueError, match="layer: expected the name of a tensor"):
        TraceExtractor(onnx, "/nope")
    ex = TraceExtractor(seg, features=PrecomputedFeatures(root / "features"))
    with pytest.raises(ValueError, match="ids: expected the image ids"):
        ex.forward(data.images[:2])
    with pytest.raises(ValueError, match="ids: expected a feature file"):
        ex.forward(data.images[:1], ["missing.png"])
    with pytest.raises(ValueError, match="features: expected an existing folder"):
        PrecomputedFeatures(tmp_path / "nope")
    pred_only = PrecomputedSegmenter(root / "logits", 3, output="logits")
    with pytest.raises(ValueError, match="model: expected a model or source that gives feature maps"):
        TraceExtractor(pred_only)
    from blindspots.models.adapters import InputPolicy

    padded = TraceExtractor(TorchSegmenter(Net().eval(), 3, policy=InputPolicy(pad=8)), LAYER)
    with pytest.raises(ValueError, match="model: expected no pad= input policy"):
        padded.forward(data.images[:1])
    ts = tmp_path / "net.ts"
    torch.jit.save(torch.jit.trace(Net().eval(), torch.zeros(1, 3, 32, 32)), str(ts))
    with pytest.raises(ValueError, match="TorchScript modules take no forward hooks"):
        TraceExtractor(TorchScriptSegmenter(ts, 3), LAYER)


def test_cli_fit_score_onnx_layer_and_precomputed_features(setup, monkeypatch):
    from blindspots.cli import app

    root, seg, onnx_path, data = setup
    for folder in ("images", "masks"):
        (root / folder).mkdir(exist_ok=True)
    for i, image_id in enumerate(data.ids):
        stem = image_id.replace("/", "_").replace(".jpg", ".png")
        Image.fromarray(data.images[i]).save(root / "images" / stem)
        Image.fromarray(data.masks[i].astype(np.uint8), mode="L").save(root / "masks" / stem)
    flat = root / "flat_features"  # the same features under the ids of the images folder
    flat.mkdir(exist_ok=True)
    flat_logits = root / "flat_logits"
    flat_logits.mkdir(exist_ok=True)
    for i, image_id in enumerate(data.ids):
        name = artifact_name(image_id.replace("/", "_").replace(".jpg", ".png"), ".npy")
        np.save(flat / name, np.load(root / "features" / artifact_name(image_id, ".npy")))
        np.save(flat_logits / name, np.load(root / "logits" / artifact_name(image_id, ".npy")))
    # a features function importable from the current folder (as `module:function` specs are)
    (root / "sa_any_feats.py").write_text(
        "from blindspots.models.adapters import OnnxSegmenter\n"
        f"NET = OnnxSegmenter({str(onnx_path)!r}, 3)\n"
        "def features(images, layer):\n"
        "    return NET.features(images, layer)\n")
    monkeypatch.chdir(root)
    runner = CliRunner()
    tables = {}
    for name, args in {"onnx": [str(onnx_path), "--layer", ONNX_LAYER],
                       "npy": [str(onnx_path), "--features", str(flat)],
                       "no model": [f"{flat_logits}?output=logits", "--features", str(flat)],
                       "callable": [f"{flat_logits}?output=logits", "--features", "sa_any_feats:features",
                                    "--layer", ONNX_LAYER]}.items():
        est = root / "sa" / f"{name}.npz"
        r = runner.invoke(app, ["surprise", "fit", *args, "--images", str(root / "images"), "--masks",
                                str(root / "masks"), "--out", str(est), "--per-class", "20"])
        assert r.exit_code == 0, r.output
        tables[name] = root / f"{name}.parquet"
        r = runner.invoke(app, ["surprise", "score", str(root / "images"), "-e", str(est), "-o",
                                str(tables[name]), "--per-class", "50"])
        assert r.exit_code == 0, r.output
    a = pd.read_parquet(tables["onnx"])
    cols = [c for c in a.columns if c.startswith("surprise_")]
    for other in ("npy", "no model", "callable"):
        b = pd.read_parquet(tables[other])
        assert list(a.columns) == list(b.columns) and len(a) == len(data.ids)
        np.testing.assert_allclose(a[cols].to_numpy(float), b[cols].to_numpy(float), rtol=1e-4, atol=1e-4,
                                   err_msg=other)
    assert np.isfinite(a["surprise_mdsa__target"]).all()
    # features read by id cannot be added to a scan's table (its compute sees pixels only): one-line error
    r = runner.invoke(app, ["surprise", "score", str(root / "images"), "-e", str(root / "sa" / "npy.npz"),
                            "--scan", str(root / "no_scan")])
    assert r.exit_code == 2 and "scan (--scan): expected features computed from pixels" in r.output, r.output
