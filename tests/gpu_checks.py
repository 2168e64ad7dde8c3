"""The GPU correctness checks, as plain functions with asserts (no pytest): tests/test_gpu.py runs them under
the `gpu` marker, benchmarks/gpu_all.py runs them on a device machine that has no pytest.

Each check takes the device to run on (torch.device) and a scratch folder, raises AssertionError (or any
exception) on failure and returns a one-line detail on success. On the CPU they check the same code paths
where those exist there (the device statistics and surprise maps in torch ops run on CPU tensors too).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from PIL import Image

C = 5


class Skip(Exception):
    """A check that cannot run on this machine (a package it needs is missing): reported, not failed."""


class TinySeg(torch.nn.Module):
    """conv(stride 2)-BN-ReLU-conv: float [N, 3, H, W] -> logits [N, C, H/2, W/2] (the adapter upsamples)."""

    def __init__(self, seed: int = 0, classes: int = C) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=2, padding=1), torch.nn.BatchNorm2d(16),
                                        torch.nn.ReLU(), torch.nn.Conv2d(16, classes, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def images(n: int, size: int, seed: int = 0) -> np.ndarray:
    """uint8 [n, size, size, 3]: smooth random fields (so argmax maps have regions, not noise)."""
    rng = np.random.default_rng(seed)
    low = rng.integers(0, 256, (n, 4, 4, 3), dtype=np.uint8)
    return np.stack([np.asarray(Image.fromarray(im).resize((size, size), Image.BILINEAR)) for im in low])


def write_pool(root: Path, n: int = 12, size: int = 48) -> Path:
    """n JPEG/PNG images of two sizes and one corrupt file: a pool with an error row."""
    root.mkdir(parents=True, exist_ok=True)
    for i, im in enumerate(images(n, size, seed=3)):
        Image.fromarray(im if i % 3 else im[:size - 8]).save(root / f"im_{i:02d}.{'jpg' if i % 2 else 'png'}")
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not a jpeg")
    return root


def segmenter(seed: int, device: torch.device, **kw):
    from blindspots.models.adapters import TorchSegmenter

    return TorchSegmenter(TinySeg(seed), C, device=str(device), **kw)


def check_device_stats(device: torch.device, _tmp: Path) -> str:
    """The scan's device statistics (fused, chunked, unfused) against the host pass, on `device` tensors."""
    from blindspots.scan.stats import device_stats, device_stats_unfused, model_stats

    for c in (2, 19, 150, 300):
        rng = np.random.default_rng(c)
        logits = rng.normal(size=(3, c, 21, 33)).astype(np.float32)
        logits[:, :2, :3, :3] = 6.0  # ties between classes 0 and 1: the first wins everywhere
        proba = torch.softmax(torch.from_numpy(logits).to(device), dim=1)
        host = model_stats(proba.cpu().numpy())
        for got in (device_stats(proba), device_stats(proba, chunk_values=c * 33 * 2), device_stats_unfused(proba)):
            assert got.argmax.dtype == host.argmax.dtype
            assert np.array_equal(got.argmax, host.argmax), f"argmax differs at C={c}"
            assert np.array_equal(got.frac, host.frac), f"class fractions differ at C={c}"
            np.testing.assert_allclose(got.entropy, host.entropy, rtol=1e-5, err_msg=f"entropy at C={c}")
            np.testing.assert_allclose(got.maxprob, host.maxprob, rtol=1e-6, err_msg=f"maxprob at C={c}")
    return "argmax and fractions exact, entropy/maxprob within 1e-5 for C in 2, 19, 150, 300"


def check_logit_stats(device: torch.device, _tmp: Path) -> str:
    """The statistics straight from logits on `device` (float32, bf16, fp16 tensors; whole-image and row
    chunks) against the host pass over their softmax: argmax and fractions exact, means to rounding."""
    from blindspots.scan.logit_stats import begin_device_logit_stats, logit_stats
    from blindspots.scan.stats import model_stats

    for c in (2, 19, 150, 300):
        rng = np.random.default_rng(c)
        logits = torch.from_numpy((rng.normal(size=(3, c, 21, 33)) * 4).astype(np.float32))
        logits[:, :2, :3, :3] = 6.0  # ties between classes 0 and 1: the first wins everywhere
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            z = logits.to(dtype)
            host = model_stats(torch.softmax(z.float(), dim=1).numpy())
            on = z.to(device)
            for got in (begin_device_logit_stats(on).result(), begin_device_logit_stats(on, c * 33 * 2).result(),
                        logit_stats(z)):
                what = f"C={c} {dtype}"
                assert got.argmax.dtype == host.argmax.dtype and np.array_equal(got.argmax, host.argmax), what
                assert np.array_equal(got.frac, host.frac), f"class fractions differ at {what}"
                np.testing.assert_allclose(got.entropy, host.entropy, rtol=1e-5, atol=1e-6, err_msg=what)
                np.testing.assert_allclose(got.maxprob, host.maxprob, rtol=1e-5, atol=1e-7, err_msg=what)
    return "argmax and fractions exact, entropy/maxprob within 1e-5 for C in 2, 19, 150, 300, fp32/bf16/fp16"


def check_scan_equals_cpu(device: torch.device, tmp: Path) -> str:
    """A scan with both models on `device`, 4 decode threads and the map pool, against the serial CPU scan."""
    from blindspots.data import ImagePool
    from blindspots.scan import read_score_table, scan_pool

    pool = ImagePool(write_pool(tmp / "pool"))
    kw = {"target": "t", "batch_size": 4, "shard_size": 4, "progress": False}
    cpu = {"t": segmenter(0, torch.device("cpu")), "g": segmenter(1, torch.device("cpu"))}
    dev = {"t": segmenter(0, device), "g": segmenter(1, device)}
    scan_pool(pool, cpu, tmp / "cpu", decode_workers=1, **kw)
    scan_pool(pool, dev, tmp / "dev", decode_workers=4, **kw)
    a, b = (read_score_table(tmp / d).set_index("id").sort_index() for d in ("cpu", "dev"))
    assert list(a["status"]) == list(b["status"]) and (a["status"] == "error").sum() == 1
    num = a.select_dtypes("number").columns
    # TF32 convolutions may flip the argmax of a near-tie pixel: a class fraction moves by 1/576 a pixel
    np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), atol=1e-2)
    maps = sorted(p.relative_to(tmp / "dev") for p in (tmp / "dev" / "maps").rglob("*.png"))
    assert maps == sorted(p.relative_to(tmp / "cpu") for p in (tmp / "cpu" / "maps").rglob("*.png")) and maps
    return f"{len(a)} rows, numbers within 1e-2, {len(maps)} maps"


def check_batch_auto(device: torch.device, tmp: Path) -> str:
    """batch_size='auto' picks a batch from the device's free memory, logs it, and scans as batch 8 does."""
    from blindspots.data import ImagePool
    from blindspots.scan import read_score_table, scan_pool

    pool = ImagePool(write_pool(tmp / "pool-auto"))
    models = {"t": segmenter(0, device, batch_size=64)}
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("blindspots.scan.engines.autobatch")
    logger.addHandler(handler)
    old = logger.level
    logger.setLevel(logging.INFO)
    try:
        scan_pool(pool, models, tmp / "auto", target="t", batch_size="auto", progress=False)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)
    scan_pool(pool, models, tmp / "b8", target="t", batch_size=8, progress=False)
    a, b = (read_score_table(tmp / d).set_index("id").sort_index() for d in ("auto", "b8"))
    num = a.select_dtypes("number").columns
    # other batches: a GPU's convolutions may round otherwise and flip a near-tie pixel (1/2304 of a fraction)
    np.testing.assert_allclose(a[num].to_numpy(float), b[num].to_numpy(float), atol=1e-2)
    chosen = [r for r in records if "images a batch" in r]
    assert chosen, f"expected a logged choice, got {records}"
    return chosen[-1]


def _fitted_surprise(device: torch.device):
    """(extractor, MDSA fitted on the model's own low-resolution traces, test images) for a model on `device`."""
    from blindspots.surprise import MDSA
    from blindspots.surprise.traces import TraceExtractor

    ext = TraceExtractor(segmenter(0, device, batch_size=8))  # one forward for the 6 test images, as the check's
    x = images(8, 64, seed=7)
    feat, y, _ = ext.forward_scores(x)
    low = torch.nn.functional.interpolate(y, size=feat.shape[-2:], mode="bilinear").argmax(1)
    traces = feat.permute(0, 2, 3, 1).reshape(-1, feat.shape[1]).cpu().numpy()
    est = MDSA().fit(traces, low.reshape(-1).cpu().numpy())
    return ext, est, images(6, 64, seed=8)


def check_surprise_device(device: torch.device, _tmp: Path) -> str:
    """Surprise maps in torch ops on `device` equal the CPU fused maps of the same features and argmax."""
    from blindspots.surprise.device import device_mdsa_map
    from blindspots.surprise.fused import fused_mdsa_map
    from blindspots.surprise.image import surprise_heatmaps

    ext, est, x = _fitted_surprise(device)
    feat, y, _ = ext.forward_scores(x)
    pred = y.argmax(1)
    got = device_mdsa_map(est, feat, pred, mode=ext.interpolation, align_corners=ext.align_corners)
    assert got.device.type == device.type
    ref = fused_mdsa_map(est, feat.cpu(), pred.cpu().numpy(), mode=ext.interpolation, align_corners=ext.align_corners)
    assert np.array_equal(np.isnan(got.cpu().numpy()), np.isnan(ref))
    np.testing.assert_allclose(got.cpu().numpy(), ref, rtol=1e-4, atol=1e-4)
    sa, pr = surprise_heatmaps(ext, est, x)  # the device path on a GPU, the CPU fused path on the CPU
    assert np.array_equal(pr, pred.cpu().numpy())
    np.testing.assert_allclose(sa, ref, rtol=1e-4, atol=1e-4)
    from blindspots.surprise import LSA  # another estimator: the host path, its features brought back first

    lsa = LSA().fit(feat.permute(0, 2, 3, 1).reshape(-1, feat.shape[1]).cpu().numpy()[::7],
                    pred[:, ::2, ::2].reshape(-1).cpu().numpy()[::7])
    sa_lsa, pr_lsa = surprise_heatmaps(ext, lsa, x[:2])
    # another batch: a GPU's convolutions may round otherwise and flip a near-tie pixel
    assert (pr_lsa == pred[:2].cpu().numpy()).mean() > 0.99 and np.isfinite(sa_lsa).any()
    return f"maps of {x.shape[0]} images {x.shape[1]}x{x.shape[2]} within 1e-4, {int(np.isnan(ref).sum())} NaN pixels"


def check_fine_tuning(device: torch.device, _tmp: Path) -> str:
    """Replay fine-tuning on `device` (precision auto: bf16 on a GPU that has it) lowers its loss."""
    from blindspots.training.replay import ReplayFinetuner

    x = images(12, 32, seed=5)
    masks = (x[..., 0].astype(np.int64) * C // 256).astype(np.uint8)  # labels by red: learnable
    pairs = [(x[i], masks[i]) for i in range(12)]
    ft = ReplayFinetuner([2e-2], epochs=4, batch_size=4, device=str(device), progress=False)
    ft.fit(TinySeg(), pairs[:6], pairs[6:10], pairs[10:], num_classes=C)
    losses = ft.runs_[0].losses
    assert all(np.isfinite(losses)) and losses[-1] < losses[0], f"losses {losses}"
    assert next(ft.model_.parameters()).device.type == device.type
    return f"losses {losses[0]:.3f} -> {losses[-1]:.3f}, val mIoU {ft.val_miou_:.3f}"


def check_label_scores_device(device: torch.device, _tmp: Path) -> str:
    """Label-quality scores of a model on `device` (its probabilities stay there) equal the scores of the same
    probabilities brought to the host."""
    try:
        from blindspots.labels import get_label_quality_scores
    except ImportError as exc:  # blindspots.labels imports scipy (its region finder)
        raise Skip(f"blindspots.labels needs {exc.name or exc}") from None

    x = images(6, 40, seed=9)
    masks = (x[..., 1].astype(np.int64) * C // 256).astype(np.uint8)
    masks[:, :4, :4] = 255  # ignored pixels
    seg = segmenter(0, device, batch_size=4)
    got, pix = get_label_quality_scores(model=seg, dataset=list(zip(x, masks)), model_batch_size=4, verbose=False)
    ref, ref_pix = get_label_quality_scores(masks, seg.predict_proba(x), verbose=False)
    assert np.array_equal(got, ref), f"image scores {got} != {ref}"
    assert np.array_equal(np.asarray(pix), ref_pix)
    return f"{len(got)} image scores and their pixel scores equal, min {got.min():.4f}"


def check_decode_jpeg_on_gpu(device: torch.device, tmp: Path) -> str:
    """torchvision's JPEG decoder on `device` (nvJPEG on a GPU) reads the pool's files to the same shapes and
    nearly the same pixels as Pillow. Not the same bits (its chroma upsampling and IDCT differ: a mean of
    3.3 levels on an H200), which is why the scan decodes with Pillow on host threads: its score table
    stays the same bits on every machine. The check bounds the difference, it does not ask for equality."""
    from torchvision.io import decode_jpeg, read_file

    root = write_pool(tmp / "pool-jpeg")
    files = sorted(root.glob("im_*.jpg"))
    datas = [read_file(str(f)) for f in files]
    got = decode_jpeg(datas, device=str(device))
    worst = 0.0
    for f, g in zip(files, got):
        ref = np.asarray(Image.open(f).convert("RGB"), dtype=np.int16)
        assert tuple(g.shape) == (3, *ref.shape[:2]), f"{f.name}: shape {tuple(g.shape)}, Pillow {ref.shape}"
        diff = np.abs(g.permute(1, 2, 0).cpu().numpy().astype(np.int16) - ref)
        worst = max(worst, float(diff.mean()))
    assert worst < 8.0, f"mean absolute difference {worst:.2f} levels (a wrong decode, not rounding)"
    return f"{len(files)} JPEGs, mean absolute difference to Pillow at most {worst:.2f} levels (not bit-identical)"


#: name -> (check, needs CUDA). Every check also runs on the CPU (there: the same code paths on CPU tensors,
#: a CPU scan with 4 decode threads against the serial one, torchvision's CPU JPEG decoder)
CHECKS: dict[str, tuple[Callable[[torch.device, Path], str], bool]] = {
    "device statistics = host statistics": (check_device_stats, False),
    "statistics from logits = from the softmax": (check_logit_stats, False),
    "scan on the device = CPU scan": (check_scan_equals_cpu, False),
    "batch_size=auto": (check_batch_auto, False),
    "surprise maps on the device = CPU maps": (check_surprise_device, False),
    "fine-tuning on the device": (check_fine_tuning, False),
    "label scores from device probabilities": (check_label_scores_device, False),
    "GPU JPEG decode close to Pillow": (check_decode_jpeg_on_gpu, False),
}
