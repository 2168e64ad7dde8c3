"""Devices and precision: `device=auto`, `precision=fp16|bf16` (autocast, float32 probabilities),
pinned-memory transfers, ONNX Runtime's CUDA provider, fine-tuning under autocast.

The CPU tests run everywhere and cover each code path (autocast on the CPU, the pinned-memory path
under its CPU fallback, device=auto choosing the CPU); the tests marked `gpu` need a CUDA device and
skip without one.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from PIL import Image

from blindspots.data import ImagePool
from blindspots.models import load_model
from blindspots.models import devices
from blindspots.models.adapters import TorchSegmenter, export_onnx
from blindspots.models.adapters.onnx import CPU_PROVIDER, CUDA_PROVIDER, providers
from blindspots.scan import api as scan_api
from blindspots.scan import read_score_table, scan_pool
from blindspots.training.replay import ReplayFinetuner
from blindspots.training.segmentation import fit_segmenter

torch.set_num_threads(1)
C = 5
HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device (torch.cuda.is_available() is False)")


class TinySeg(torch.nn.Module):
    """conv-BN-ReLU-conv at full resolution: float [N, 3, H, W] -> logits [N, C, H, W]."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16),
                                        torch.nn.ReLU(), torch.nn.Conv2d(16, C, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def images(n: int = 6, size: int = 24, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def scripted(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gpu") / "tiny.ts"
    torch.jit.save(torch.jit.script(TinySeg().eval()), path)
    return path


# -- device=auto ---------------------------------------------------------------------------------------------


def test_device_auto_is_cuda_when_present_else_cpu(scripted):
    want = "cuda" if HAS_CUDA else "cpu"
    assert devices.resolve_device("auto").type == want
    assert devices.resolve_device(None).type == want
    seg = load_model(f"{scripted}?num_classes={C}")  # a spec without device: auto
    assert seg.device.type == want
    assert next(seg.module.parameters()).device.type == want
    assert load_model(f"{scripted}?num_classes={C}&device=cpu").device.type == "cpu"


@pytest.mark.skipif(HAS_CUDA, reason="checks the error on a machine without CUDA")
def test_device_cuda_without_a_gpu_is_a_clear_error(scripted):
    with pytest.raises(ValueError, match="device.*no CUDA device"):
        load_model(f"{scripted}?num_classes={C}&device=cuda")
    with pytest.raises(ValueError, match="device"):
        TorchSegmenter(TinySeg(), C, device="tpu9")


# -- precision -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_autocast_on_cpu_gives_float32_probabilities_close_to_fp32(precision):
    x = images(8, 32)
    ref = TorchSegmenter(TinySeg(), C, device="cpu").predict_proba(x)
    seg = TorchSegmenter(TinySeg(), C, device="cpu", precision=precision)
    got = seg.predict_proba(x)
    assert got.dtype == np.float32 and got.shape == ref.shape
    np.testing.assert_allclose(got.sum(1), 1.0, atol=1e-5)  # the softmax ran in float32
    assert not np.array_equal(got, ref)  # autocast did change the arithmetic
    assert np.abs(got - ref).max() < 0.05
    assert (got.argmax(1) == ref.argmax(1)).mean() > 0.95


def test_precision_spec_option(scripted):
    seg = load_model(f"{scripted}?num_classes={C}&device=cpu&precision=bf16")
    assert seg.precision == "bf16"
    ref = load_model(f"{scripted}?num_classes={C}&device=cpu")
    assert ref.precision == "fp32"
    x = images(4, 32)
    assert np.abs(seg.predict_proba(x) - ref.predict_proba(x)).max() < 0.05
    with pytest.raises(ValueError, match="precision.*fp32\\|fp16\\|bf16.*'fp8'"):
        load_model(f"{scripted}?num_classes={C}&precision=fp8")
    with pytest.raises(ValueError, match="precision"):
        TorchSegmenter(TinySeg(), C, precision="int8")


def test_scan_settings_tell_bf16_from_fp32(scripted):
    from blindspots.scan.fingerprint import model_settings

    plain = load_model(f"{scripted}?num_classes={C}")
    assert model_settings(plain) == model_settings(load_model(f"{scripted}?num_classes={C}&precision=fp32"))
    assert model_settings(plain) != model_settings(load_model(f"{scripted}?num_classes={C}&precision=bf16"))


# -- pinned memory -------------------------------------------------------------------------------------------


def test_pinned_transfer_falls_back_on_cpu():
    a = images(3, 16)
    pinned = devices.pin_array(a)
    np.testing.assert_array_equal(pinned, a)
    t = torch.from_numpy(pinned)
    assert t.is_pinned() == HAS_CUDA  # pinned where a driver exists, the array itself otherwise
    assert devices.to_device(t, torch.device("cpu")) is t  # to the CPU: no copy


def write_pool(root: Path, n: int = 10) -> Path:
    root.mkdir(parents=True)
    for i, im in enumerate(images(n, 24, seed=3)):
        Image.fromarray(im if i % 3 else im[:20]).save(root / f"im_{i:02d}.png")  # two sizes
    return root


def test_scan_with_pinned_batches_equals_the_plain_scan(tmp_path, monkeypatch):
    """The reader thread's pinning (taken when a model is on a GPU) forced on: on the CPU it falls
    back to the decoded arrays, on a GPU machine it pins them; the table is the plain scan's."""
    pool = ImagePool(write_pool(tmp_path / "pool"))
    models = {"t": TorchSegmenter(TinySeg(0), C, batch_size=4), "g": TorchSegmenter(TinySeg(1), C, batch_size=4)}
    kw = {"target": "t", "batch_size": 4, "shard_size": 4, "progress": False}
    scan_pool(pool, models, tmp_path / "plain", **kw)
    pinned: list[tuple[int, ...]] = []
    real = devices.pin_array

    def counting(a: np.ndarray) -> np.ndarray:
        pinned.append(a.shape)
        return real(a)

    monkeypatch.setattr(devices, "pin_array", counting)
    monkeypatch.setattr(scan_api, "on_gpu", lambda m: True)
    scan_pool(pool, models, tmp_path / "pinned", **kw)
    assert sum(s[0] for s in pinned) == 10  # every decoded image went through the pinning path
    a, b = (read_score_table(tmp_path / d).set_index("id").sort_index() for d in ("plain", "pinned"))
    pd.testing.assert_frame_equal(a, b, check_exact=True)


# -- ONNX Runtime providers ----------------------------------------------------------------------------------


def test_onnx_providers_follow_the_device():
    cpu_only = ["AzureExecutionProvider", CPU_PROVIDER]
    both = [CUDA_PROVIDER, CPU_PROVIDER]
    assert providers("auto", cpu_only) == [CPU_PROVIDER]
    assert providers("cpu", both) == [CPU_PROVIDER]
    assert providers("auto", both) == ([(CUDA_PROVIDER, {"device_id": 0}), CPU_PROVIDER] if HAS_CUDA
                                       else [CPU_PROVIDER])  # onnxruntime-gpu on a machine without a GPU
    assert providers("cuda:1", both) == [(CUDA_PROVIDER, {"device_id": 1}), CPU_PROVIDER]
    with pytest.raises(ValueError, match="device.*onnxruntime-gpu"):
        providers("cuda", cpu_only)
    with pytest.raises(ValueError, match="device: expected 'auto'"):
        providers("gpu", both)


def test_onnx_spec_runs_on_the_provider_it_can(tmp_path):
    import onnxruntime as ort

    pytest.importorskip("onnx", reason="exporting the test model to ONNX needs the onnx package")

    path = export_onnx(TinySeg().eval(), tmp_path / "tiny.onnx", height=24, width=24)
    seg = load_model(f"{path}?num_classes={C}")  # device=auto
    gpu_ok = CUDA_PROVIDER in ort.get_available_providers() and HAS_CUDA
    assert seg.session.get_providers()[0] == (CUDA_PROVIDER if gpu_ok else CPU_PROVIDER)
    ref = TorchSegmenter(TinySeg().eval(), C).predict_proba(images(2, 24))
    np.testing.assert_allclose(seg.predict_proba(images(2, 24)), ref, atol=5e-3 if gpu_ok else 1e-4)  # TF32 on CUDA


# -- fine-tuning under autocast ------------------------------------------------------------------------------


def training_data(n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    x = images(n, 16, seed=5)
    return x, (x[..., 0].astype(np.int64) * C // 256)  # labels by red: learnable


def test_fit_segmenter_auto_precision_on_cpu_is_fp32_and_bf16_trains():
    data = training_data()
    kw = {"epochs": 2, "batch_size": 4, "lr": 5e-3, "seed": 0, "progress": False}
    auto = fit_segmenter(TinySeg(), data, device="auto" if not HAS_CUDA else "cpu", **kw)
    fp32 = fit_segmenter(TinySeg(), data, precision="fp32", **kw)
    for a, b in zip(auto.model.state_dict().values(), fp32.model.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)  # CPU training unchanged
    for precision in ("bf16", "fp16"):  # fp16: through the loss scaler
        res = fit_segmenter(TinySeg(), data, precision=precision, **kw)
        losses = [h["loss"] for h in res.history]
        assert all(np.isfinite(losses)) and losses[-1] < losses[0]


def test_replay_finetuner_with_bf16_autocast_on_cpu():
    x, y = training_data(6)
    pairs = [(x[i], y[i].astype(np.uint8)) for i in range(6)]
    ft = ReplayFinetuner([1e-2], epochs=2, batch_size=2, precision="bf16", progress=False)
    ft.fit(TinySeg(), pairs[:2], pairs[2:4], pairs[4:], num_classes=C)
    assert np.isfinite(ft.val_miou_) and all(np.isfinite(ft.runs_[0].losses))
    with pytest.raises(ValueError, match="precision"):
        ReplayFinetuner([1e-2], epochs=1, precision="fp8", progress=False).fit(TinySeg(), pairs[:2], pairs[2:4],
                                                                              pairs[4:], num_classes=C)


# -- on a GPU ------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_gpu_probabilities_match_the_cpu(precision):
    x = images(8, 64)
    ref = TorchSegmenter(TinySeg(), C, device="cpu").predict_proba(x)
    got = TorchSegmenter(TinySeg(), C, device="cuda", precision=precision).predict_proba(x)
    assert got.dtype == np.float32
    # fp32 on a GPU still differs in the last bits (cuDNN's algorithms, TF32 convolutions on Ampere and newer)
    assert np.abs(got - ref).max() < (5e-3 if precision == "fp32" else 0.05)


@pytest.mark.gpu
@gpu
def test_gpu_scan_pins_batches_and_equals_the_cpu_scan(tmp_path):
    pool = ImagePool(write_pool(tmp_path / "pool"))
    kw = {"target": "t", "batch_size": 4, "shard_size": 4, "progress": False, "save_maps": False}
    cpu = {"t": TorchSegmenter(TinySeg(0), C), "g": TorchSegmenter(TinySeg(1), C)}
    cuda = {"t": TorchSegmenter(TinySeg(0), C, device="auto"), "g": TorchSegmenter(TinySeg(1), C, device="cuda")}
    assert torch.from_numpy(devices.pin_array(images(1))).is_pinned()  # the pinned array keeps its pinned memory
    scan_pool(pool, cpu, tmp_path / "cpu", **kw)
    scan_pool(pool, cuda, tmp_path / "cuda", **kw)
    a, b = (read_score_table(tmp_path / d).set_index("id").sort_index() for d in ("cpu", "cuda"))
    num = a.select_dtypes("number").columns
    # TF32 convolutions may flip the argmax of a near-tie pixel: a class fraction moves by 1/576 per pixel
    np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), atol=1e-2)


@pytest.mark.gpu
@gpu
def test_gpu_fine_tuning_under_autocast():
    res = fit_segmenter(TinySeg(), training_data(), epochs=2, batch_size=4, lr=5e-3, device="cuda", progress=False)
    losses = [h["loss"] for h in res.history]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert next(res.model.parameters()).device.type == "cuda"


# -- statistics where the probabilities are ------------------------------------------------------------------


@pytest.mark.parametrize("c", [2, 7, 300])
def test_device_stats_equal_the_host_pass(c):
    """The torch pass a GPU scan takes its statistics with (run here on CPU tensors) gives the host pass's
    numbers: argmax maps equal (ties included: the first maximum), fractions exact, means to rounding."""
    from blindspots.scan.stats import device_stats, model_stats

    rng = np.random.default_rng(c)
    logits = rng.normal(size=(3, c, 9, 11)).astype(np.float32)
    logits[:, :2, :2, :2] = 5.0  # ties between classes 0 and 1: both must pick 0
    proba = torch.softmax(torch.from_numpy(logits), dim=1)
    host, dev = model_stats(proba.numpy()), device_stats(proba)
    assert dev.argmax.dtype == host.argmax.dtype == (np.uint8 if c <= 256 else np.int32)
    np.testing.assert_array_equal(dev.argmax, host.argmax)
    np.testing.assert_array_equal(dev.frac, host.frac)
    np.testing.assert_allclose(dev.entropy, host.entropy, rtol=1e-5)
    np.testing.assert_allclose(dev.maxprob, host.maxprob, rtol=1e-6)
    with pytest.raises(ValueError, match="proba"):
        device_stats(proba[0])
    for chunk in (1, c * 11 * 2, c * 11 * 9 + 1):  # one row at a time, two rows, the whole image
        part = device_stats(proba, chunk_values=chunk)
        for name in ("argmax", "frac", "maxprob"):
            np.testing.assert_array_equal(getattr(part, name), getattr(dev, name))
        np.testing.assert_allclose(part.entropy, dev.entropy, rtol=1e-6)  # torch may vectorise a chunk's sum otherwise


def test_fused_device_stats_equal_the_unfused_version():
    from blindspots.scan.stats import device_stats, device_stats_unfused

    proba = torch.softmax(torch.from_numpy(np.random.default_rng(1).normal(size=(2, 40, 16, 24)).astype(np.float32)), 1)
    a, b = device_stats(proba), device_stats_unfused(proba)
    np.testing.assert_array_equal(a.argmax, b.argmax)
    np.testing.assert_array_equal(a.frac, b.frac)
    np.testing.assert_allclose(a.entropy, b.entropy, rtol=1e-6)
    np.testing.assert_array_equal(a.maxprob, b.maxprob)


def test_cpu_models_keep_the_host_path():
    from blindspots.scan.engines.forward import on_accelerator

    assert not on_accelerator(TorchSegmenter(TinySeg(), C, device="cpu"))
    assert not on_accelerator(lambda x: x)


@pytest.mark.gpu
@gpu
def test_gpu_adapter_leaves_probabilities_on_the_device():
    from blindspots.scan.engines.forward import on_accelerator

    seg = TorchSegmenter(TinySeg(), C, device="cuda")
    assert on_accelerator(seg)
    got = seg.predict_proba_device(images(3, 32))
    assert got.device.type == "cuda" and got.dtype == torch.float32
    np.testing.assert_allclose(got.cpu().numpy(), seg.predict_proba(images(3, 32)), atol=1e-6)


# -- the device machine's checks (tests/gpu_checks.py; benchmarks/gpu_all.py runs them without pytest) -------


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("name", sorted(__import__("gpu_checks").CHECKS))
def test_gpu_check(name, tmp_path):
    from gpu_checks import CHECKS, Skip

    try:
        CHECKS[name][0](torch.device("cuda"), tmp_path)
    except Skip as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("name", ["device statistics = host statistics", "surprise maps on the device = CPU maps",
                                  "scan on the device = CPU scan"])
def test_gpu_checks_hold_on_the_cpu(name, tmp_path):
    """The same code paths on CPU tensors (and a 4-thread CPU scan against the serial one)."""
    from gpu_checks import CHECKS

    CHECKS[name][0](torch.device("cpu"), tmp_path)


def test_device_stats_of_channels_last_probabilities():
    """The scan's upsampled logits are channels-last (the adapter's input is NHWC memory): same statistics."""
    from blindspots.scan.stats import device_stats

    proba = torch.softmax(torch.from_numpy(np.random.default_rng(4).normal(size=(3, 6, 10, 14)).astype(np.float32)), 1)
    last = proba.contiguous(memory_format=torch.channels_last)
    for chunk in (1 << 26, 6 * 14 * 3):  # whole images, and three rows at a time
        a, b = device_stats(proba, chunk_values=chunk), device_stats(last, chunk_values=chunk)
        for name in ("argmax", "frac", "maxprob"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
        np.testing.assert_allclose(a.entropy, b.entropy, rtol=1e-6)
