"""Label-quality scoring from probabilities left on the model's device (labels/_internal/device.py).

Run here on CPU tensors (the same torch ops a GPU runs; the device path is forced by patching the
accelerator test); tests/test_gpu.py's checks run it on CUDA."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from blindspots.labels import rank
from blindspots.labels._internal.device import device_scan_chunk
from blindspots.labels._internal.inputs import BadLabelError
from blindspots.labels._internal.pixels import scan_chunk
from blindspots.models.adapters import TorchSegmenter

torch.set_num_threads(1)
K = 4


def chunk(seed: int = 0, b: int = 3, h: int = 9, w: int = 13) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    probs = torch.softmax(torch.from_numpy(rng.normal(size=(b, K, h, w)).astype(np.float32)), 1).numpy()
    labels = rng.integers(0, K, (b, h, w))
    labels[:, :2, :3] = 255  # ignored pixels score 1.0
    return labels, probs


def test_device_chunk_equals_the_host_chunk():
    labels, probs = chunk()
    host = scan_chunk(labels, probs, 255, need_pred=False, check=True)
    dev = device_scan_chunk(labels, torch.from_numpy(probs), 255)
    np.testing.assert_array_equal(dev.score, host.score)  # a gather: the same bits
    np.testing.assert_array_equal(dev.valid, host.valid)
    assert dev.note is None and host.note is None and dev.score.dtype == np.float32
    out = np.empty(labels.shape, np.float32)
    assert device_scan_chunk(labels, torch.from_numpy(probs), 255, score=out).score is out


def test_device_chunk_checks_say_what_the_host_says():
    labels, probs = chunk(1)
    bad = labels.copy()
    bad[1, 4, 5] = 7
    with pytest.raises(BadLabelError, match=r"labels: expected class ids in 0\.\.3 or ignore_index 255, got 7 at "
                                            r"image 11, pixel \(4, 5\)"):
        device_scan_chunk(bad, torch.from_numpy(probs), 255, start=10)
    nan = probs.copy()
    nan[2, 1, 3, 3] = np.nan
    with pytest.raises(ValueError, match=r"pred_probs: expected finite probabilities.*image 2, pixel \(3, 3\)"):
        device_scan_chunk(labels, torch.from_numpy(nan), 255)
    loose = probs * 1.01
    assert "sum" in device_scan_chunk(labels, torch.from_numpy(loose), 255).note
    assert device_scan_chunk(labels, torch.from_numpy(loose), 255, describe=False).note == "rows off 1"


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, K, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


@pytest.mark.parametrize("sizes", [(16, 16, 20, 16, 20), (16,) * 5])  # two sizes (lists of maps), one (an array)
def test_scores_from_device_probabilities_equal_the_host_scores(monkeypatch, sizes):
    rng = np.random.default_rng(2)
    pairs = [(rng.integers(0, 256, (s, s + 4, 3), dtype=np.uint8), rng.integers(0, K, (s, s + 4)).astype(np.uint8))
             for s in sizes]
    model = TorchSegmenter(Net(), K)
    kw = {"model": model, "dataset": pairs, "model_batch_size": 2, "verbose": False}
    host_img, host_pix = rank.get_label_quality_scores(**kw)
    used = []
    real = rank.device_scan_chunk
    monkeypatch.setattr(rank, "on_accelerator", lambda m: True)  # the GPU path, on CPU tensors
    monkeypatch.setattr(rank, "device_scan_chunk", lambda *a, **k: used.append(1) or real(*a, **k))
    dev_img, dev_pix = rank.get_label_quality_scores(**kw)
    assert used  # the device path ran
    np.testing.assert_array_equal(dev_img, host_img)
    assert len(dev_pix) == len(host_pix) == 5
    for a, b in zip(dev_pix, host_pix):
        np.testing.assert_array_equal(a, b)
