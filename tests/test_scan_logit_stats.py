"""The scan's statistics straight from logits (`scan.logit_stats`) against the statistics of their softmax
(`scan.stats.model_stats`, the numbers the score table held before): argmax maps and class fractions exact,
entropy and maximum probability to float32 rounding; host and torch passes; the adapters' logits; a scan.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from blindspots.data import ImagePool
from blindspots.models.adapters import CallableSegmenter, TorchSegmenter
from blindspots.scan import read_score_table, scan_pool
from blindspots.scan.engines.forward import gives_logits
from blindspots.scan.logit_stats import Logits, begin_device_logit_stats, logit_stats
from blindspots.scan.stats import model_stats, model_stats_on
from pool_sources_helpers import photos, write_folder

torch.set_num_threads(1)


def reference(z: np.ndarray):
    """`model_stats` of the softmax of z (float32, as the adapters computed it)."""
    return model_stats(torch.softmax(torch.from_numpy(z.astype(np.float32)), dim=1).numpy())


def assert_close(got, ref, what: str) -> None:
    assert got.argmax.dtype == ref.argmax.dtype, what
    np.testing.assert_array_equal(got.argmax, ref.argmax, err_msg=what)
    np.testing.assert_array_equal(got.frac, ref.frac, err_msg=what)
    np.testing.assert_allclose(got.entropy, ref.entropy, rtol=1e-5, atol=1e-6, err_msg=what)
    np.testing.assert_allclose(got.maxprob, ref.maxprob, rtol=1e-5, atol=1e-7, err_msg=what)
    assert got.entropy.dtype == got.maxprob.dtype == got.frac.dtype == np.float32, what


SHAPES = [(1, 2, 1, 1), (2, 2, 33, 65), (3, 8, 17, 9), (1, 19, 130, 129), (2, 150, 12, 40), (2, 300, 5, 7)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_host_logit_stats_equal_the_softmax_statistics(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    z = (rng.normal(size=shape) * 4).astype(dtype)
    if shape[1] > 2 and shape[2] > 2:
        z[:, :2, :2, :2] = 3.0  # ties between classes 0 and 1: the first maximum wins, as np.argmax
    assert_close(logit_stats(z), reference(z), f"{shape} {np.dtype(dtype).name}")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_torch_logit_stats_equal_the_softmax_statistics(shape, dtype):
    """The device pass, run here on CPU tensors: whole images a chunk, and rows of one image a chunk."""
    rng = np.random.default_rng(sum(shape) + 1)
    z = torch.from_numpy((rng.normal(size=shape) * 4).astype(np.float32)).to(dtype)
    ref = reference(z.float().numpy())
    n, c, h, w = shape
    for chunk in (n * c * h * w, c * w + 1, 1):
        assert_close(begin_device_logit_stats(z, chunk_values=chunk).result(), ref, f"{shape} {dtype} {chunk}")


def test_large_logits_do_not_overflow_and_one_hot_is_certain():
    z = np.zeros((2, 4, 3, 5), np.float32)
    z[0, 2] = 1e4  # exp(1e4) overflows float32: z - max keeps every exp in (0, 1]
    z[1] = np.linspace(-3e4, 3e4, 4, dtype=np.float32)[:, None, None]
    for got in (logit_stats(z), begin_device_logit_stats(torch.from_numpy(z)).result()):
        assert np.all(got.maxprob == 1) and np.all(got.entropy == 0)
        assert got.frac[0, 2] == 1 and got.frac[1, 3] == 1


def test_two_classes_take_one_exp_a_pixel_and_the_same_numbers():
    """The two-class pass (-|z1 - z0|, one exp): ties go to class 0, an even pixel has entropy log 2."""
    z = (np.random.default_rng(3).normal(size=(3, 2, 40, 70)) * 5).astype(np.float32)
    z[:, 1, :5] = z[:, 0, :5]  # ties on five rows
    got = logit_stats(z)
    assert_close(got, reference(z), "two classes with ties")
    assert np.all(got.argmax[:, :5] == 0)
    even = logit_stats(np.zeros((1, 2, 3, 3), np.float32))
    assert np.isclose(even.entropy[0], np.log(2), rtol=1e-6) and even.maxprob[0] == np.float32(0.5)


def test_blocks_threads_and_bad_input():
    """An image of several blocks; a batch split over threads is the same bits as one call; a clear error."""
    rng = np.random.default_rng(7)
    z = rng.normal(size=(5, 3, 230, 150)).astype(np.float32)  # 34,500 pixels: two blocks of 3 classes
    one = logit_stats(z)
    assert_close(one, reference(z), "blocks")
    with ThreadPoolExecutor(2) as ex:
        split = model_stats_on(Logits(z), ex, parts=3)
    for name in ("argmax", "frac", "entropy", "maxprob"):
        np.testing.assert_array_equal(getattr(split, name), getattr(one, name))
    np.testing.assert_array_equal(model_stats(Logits(z)).entropy, one.entropy)
    np.testing.assert_array_equal(logit_stats(torch.from_numpy(z)).entropy, one.entropy)
    with pytest.raises(ValueError, match=r"logits: expected shape \[N, C, H, W\], got \(3, 230, 150\)"):
        logit_stats(z[0])
    with pytest.raises(ValueError, match="logits: expected shape"):
        begin_device_logit_stats(torch.from_numpy(z[0]))


class Binary(torch.nn.Module):
    """One output channel: a binary model's logit."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :1] * 3 - 1


def tiny_net(seed: int, c: int = 4) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, c, 1))


def test_adapter_logits_are_the_probabilities_before_their_softmax():
    x = np.random.default_rng(0).integers(0, 256, (3, 20, 26, 3), dtype=np.uint8)
    for seg in (TorchSegmenter(tiny_net(0), 4, batch_size=2), TorchSegmenter(Binary(), 2)):
        z = seg.predict_logits(x)
        assert z.dtype == np.float32 and z.shape == (3, seg.num_classes, 20, 26) and gives_logits(seg)
        np.testing.assert_allclose(torch.softmax(torch.from_numpy(z), 1).numpy(), seg.predict_proba(x), atol=1e-6)
        assert isinstance(seg.predict_logits(x, on_device=True), torch.Tensor)
    class Calibrated(TorchSegmenter):  # its own probabilities: the scan must not bypass them with the logits
        def predict_proba(self, images, ids=None):
            return super().predict_proba(images) ** 2

    assert not gives_logits(Calibrated(tiny_net(0), 4))
    probs = TorchSegmenter(torch.nn.Sequential(tiny_net(0), torch.nn.Softmax(1)), 4, output="probabilities")
    assert not gives_logits(probs)
    with pytest.raises(ValueError, match="output: predict_logits expected an adapter of output='logits', "
                                         "got 'probabilities'"):
        probs.predict_logits(x)


def test_scan_from_logits_equals_the_scan_from_probabilities(tmp_path: Path):
    """The same nets scanned through their logits (TorchSegmenter) and through their probabilities (a callable
    returning predict_proba): the same statuses, maps and pair distances; entropy and max probability to
    float32 rounding."""
    pool = ImagePool(write_folder(tmp_path / "pool", photos(12)))
    nets = {"t": TorchSegmenter(tiny_net(0), 4), "g": TorchSegmenter(tiny_net(1), 4)}
    via_proba = {k: CallableSegmenter(m.predict_proba, 4) for k, m in nets.items()}
    kw = {"target": "t", "batch_size": 4, "shard_size": 8, "progress": False}
    scan_pool(pool, nets, tmp_path / "logits", decode_workers=2, **kw)
    scan_pool(pool, via_proba, tmp_path / "proba", decode_workers=2, **kw)
    a, b = (read_score_table(tmp_path / d).set_index("id").sort_index() for d in ("logits", "proba"))
    close = [col for col in a.columns if "entropy" in col or "maxprob" in col]
    assert close and (a["status"] == "error").sum() >= 1
    pd.testing.assert_frame_equal(a.drop(columns=close), b.drop(columns=close), check_exact=True)
    np.testing.assert_allclose(a[close].to_numpy(float), b[close].to_numpy(float), rtol=1e-5, atol=1e-6)
    maps = {p.relative_to(tmp_path / "logits"): p.read_bytes() for p in (tmp_path / "logits" / "maps").rglob("*.png")}
    assert maps and maps == {p.relative_to(tmp_path / "proba"): p.read_bytes()
                             for p in (tmp_path / "proba" / "maps").rglob("*.png")}
