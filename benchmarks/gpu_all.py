"""Every GPU check and benchmark of the scan's engines in one run (about 4 minutes on one H200), without pytest.

    PYTHONPATH=src python benchmarks/gpu_all.py           # on a CUDA machine; JSON to $OUT/gpu_all.json when OUT is set
    PYTHONPATH=src python benchmarks/gpu_all.py --tiny    # any machine: tiny models and pool, every code path

Needs only torch, torchvision, transformers, pyarrow, pandas, numba, typer and Pillow (no pytest, no Ray).

1. Checks (tests/gpu_checks.py), PASS or FAIL each: device statistics against the host pass, a scan on the
   device against the CPU scan, batch_size=auto, surprise maps on the device against the CPU maps, replay
   fine-tuning, label scores from device probabilities, torchvision's GPU JPEG decoder against Pillow.
2. Benchmarks, on the MiT-b2-like SegFormer of benchmarks/gpu_scan.py (27.5 M parameters, random weights,
   150 classes) and `--n` JPEGs of 512x512:
   a. scan vs model alone, fp32 and bf16: the scan (`scan_pool`, batch_size="auto", decode threads, map
      pool), the scan at batch 8 with no pixel budget, forward + device statistics, and the model alone at
      batch 8 and at the auto batch (forward + statistics both ways: softmax then `device_stats` as the scan takes
      them, and from the logits, the device path not used yet); medians of `--rounds` interleaved rounds; then three scans
      with the scan's stage clock logged (default settings, 16 decode threads, Python's 5 ms GIL switch
      interval);
   b. precision: the model alone at fp32, fp32 with TF32 matmuls, bf16 under autocast (as the adapter
      runs it), bf16 autocast with an NCHW-contiguous input (the adapter's is channels-last strided),
      and bf16 weights without autocast; at batch 8 and the auto batch;
   c. statistics: `device_stats` (two reads, one scratch) against `device_stats_unfused` (three full-size
      temporaries) on [8, 150, 512, 512] probabilities: time and peak memory above the input; the scan's
      path from 1/4-resolution logits (upsample, softmax, `device_stats`) against the device logits path it
      does not use yet (upsample, `begin_device_logit_stats`, no probability tensor), and the two paths'
      numbers compared;
   d. fine-tuning: `ReplayFinetuner`'s training loop against a plain torch loop (same module, data, SGD,
      autocast), images/s;
   e. surprise maps (`surprise_heatmaps`, MDSA on the decoder's 768-channel input) against the forward
      with the feature hook alone, images/s;
   f. label-quality scores (`get_label_quality_scores`, softmin) of 16 images with the probabilities left
      on the GPU, against the same model's probabilities brought to the host first;
   g. decoding the pool's JPEGs: Pillow on 1 / 4 / all host threads, a process pool, torchvision's
      `decode_jpeg(device="cuda")`.
Prints a compact table of the figures, the GPU, the CPU model and the load.
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import multiprocessing
import os
import shutil
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the checks: tests/gpu_checks.py

from gpu_checks import CHECKS, Skip  # noqa: E402
from gpu_scan import B2, TINY, make_model, make_pool, model_only, sync  # noqa: E402

from blindspots.data.sources import decode_image  # noqa: E402
from blindspots.machine import cpu_model  # noqa: E402
from blindspots.models.devices import autocast  # noqa: E402
from blindspots.models.load import load_model  # noqa: E402
from blindspots.scan import scan_pool  # noqa: E402
from blindspots.scan.engines import local as local_engine  # noqa: E402
from blindspots.scan.engines.autobatch import auto_limits  # noqa: E402
from blindspots.scan.logit_stats import begin_device_logit_stats  # noqa: E402
from blindspots.scan.stats import device_stats, device_stats_unfused  # noqa: E402

RESULTS: dict[str, Any] = {}
T0 = time.perf_counter()


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def say(msg: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {msg}", flush=True)


def timed(fn: Callable[[], Any], device: torch.device) -> float:
    """Seconds of fn(), the device's queued work included."""
    sync(device)
    t = time.perf_counter()
    fn()
    sync(device)
    return time.perf_counter() - t


# -- 1. checks -----------------------------------------------------------------------------------------------


def run_checks(device: torch.device, work: Path) -> None:
    got = {}
    for name, (check, needs_cuda) in CHECKS.items():
        if needs_cuda and device.type != "cuda":
            print(f"SKIP  {name}: needs CUDA")
            got[name] = "skip"
            continue
        tmp = work / "checks" / name.split()[0]
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        t = time.perf_counter()
        try:
            detail = check(device, tmp)
        except Skip as exc:
            print(f"SKIP  {name}: {exc}", flush=True)
            got[name] = f"skip {exc}"
            continue
        except Exception as exc:  # noqa: BLE001 - every check reports, the run goes on
            print(f"FAIL  {name} ({time.perf_counter() - t:.1f} s): {type(exc).__name__}: {exc}", flush=True)
            traceback.print_exc(limit=3)
            got[name] = f"FAIL {type(exc).__name__}: {exc}"[:400]
        else:
            print(f"PASS  {name} ({time.perf_counter() - t:.1f} s): {detail}", flush=True)
            got[name] = "PASS " + detail
    RESULTS["checks"] = got


# -- 2a. scan vs model alone ---------------------------------------------------------------------------------


def batches_of(images: list[np.ndarray], b: int) -> list[np.ndarray]:
    return [np.stack(images[s:s + b]) for s in range(0, len(images), b)]


def scan_once(seg: Any, pool: Any, out: Path, batch_size: Any, max_pixels: Any = "default",
              decode_workers: int | None = None) -> float:
    shutil.rmtree(out, ignore_errors=True)
    kw = {} if max_pixels == "default" else {"max_pixels": max_pixels}
    if decode_workers is not None:
        kw["decode_workers"] = decode_workers
    t = time.perf_counter()
    scan_pool(pool, {"m": seg}, out, target="m", batch_size=batch_size, shard_size=256, progress=False, **kw)
    return time.perf_counter() - t


def bench_scan(models: dict[str, Any], pool: Any, images: list[np.ndarray], auto_b: int, rounds: int,
               work: Path) -> None:
    n = len(images)
    b8, bauto = batches_of(images, 8), batches_of(images, auto_b)
    rows: dict[str, dict[str, float]] = {}
    for p, seg in models.items():
        dev = seg.device
        scan_once(seg, pool, work / "scan-warm", "auto")  # warm-up: cuDNN autotuning, first-call imports
        model_only(seg, bauto[:2])
        keys = ("scan_auto", "scan_b8", "stats_auto", "logit_stats_auto", "model_b8", "model_auto")
        got: dict[str, list[float]] = {k: [] for k in keys}
        for r in range(rounds):
            order = list(keys)
            for key in (order if r % 2 == 0 else order[::-1]):
                if key == "scan_auto":
                    t = scan_once(seg, pool, work / "scan", "auto")
                elif key == "scan_b8":
                    t = scan_once(seg, pool, work / "scan", 8, max_pixels=None)
                elif key == "stats_auto":  # the scan's device path: the softmax, then its statistics
                    t = timed(lambda: [device_stats(seg.predict_proba_device(b)) for b in bauto], dev)
                elif key == "logit_stats_auto":  # the candidate: the statistics from the logits
                    t = timed(lambda: [begin_device_logit_stats(seg.predict_logits(b, on_device=True)).result()
                                       for b in bauto], dev)
                elif key == "model_b8":
                    t = model_only(seg, b8)
                else:
                    t = model_only(seg, bauto)
                got[key].append(n / t)
        rows[p] = {k: float(np.median(v)) for k, v in got.items()}
        stage_log = logging.getLogger("blindspots.scan.engines.local")
        stage_log.setLevel(logging.DEBUG)  # where the scan's threads wait: one line a scan
        try:
            for workers, switch in ((None, None), (16, None), (None, 5e-3)):
                old_switch = local_engine.SCAN_SWITCH_INTERVAL_S
                local_engine.SCAN_SWITCH_INTERVAL_S = switch or old_switch  # Python's default 5 ms: the GIL's share
                try:
                    t = scan_once(seg, pool, work / "scan", "auto", decode_workers=workers)
                finally:
                    local_engine.SCAN_SWITCH_INTERVAL_S = old_switch
                key = f"scan_auto_{workers or 'default'}_workers_switch_{switch or old_switch:g}"
                rows[p][key] = n / t
                say(f"{p}: scan (auto batch, decode workers {workers or 'default'}, GIL switch interval "
                    f"{switch or old_switch:g} s) {n / t:.1f} img/s")
        finally:
            stage_log.setLevel(logging.WARNING)
        r_ = rows[p]
        say(f"{p}: scan (auto batch {auto_b}) {r_['scan_auto']:.1f} img/s, scan (batch 8) {r_['scan_b8']:.1f}, "
            f"forward + device statistics {r_['stats_auto']:.1f} (from logits {r_['logit_stats_auto']:.1f}), "
            f"model alone batch 8 {r_['model_b8']:.1f}, "
            f"batch {auto_b} {r_['model_auto']:.1f}; scan / model alone (auto) "
            f"{r_['scan_auto'] / r_['model_auto']:.3f}; {load()}")
    RESULTS["scan"] = {"auto_batch": auto_b, "images": n, "rounds": rounds, "img_per_s": rows}


# -- 2b. precision variants of the model alone ---------------------------------------------------------------


def forward_variant(module: torch.nn.Module, seg: Any, batches: list[np.ndarray], prep: Callable, ctx: Callable
                    ) -> float:
    dev = seg.device
    with torch.no_grad():
        for b in batches[:1]:  # warm-up of this variant's kernels
            with ctx():
                module(prep(seg.preprocess(b, dev)))
        sync(dev)
        t = time.perf_counter()
        for b in batches:
            with ctx():
                module(prep(seg.preprocess(b, dev)))
        sync(dev)
    return time.perf_counter() - t


@contextmanager
def tf32() -> Iterator[None]:
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def bench_precision(seg32: Any, images: list[np.ndarray], auto_b: int) -> None:
    dev = seg32.device
    amp_bf16 = lambda: autocast(dev, "bf16")  # noqa: E731
    as_is = lambda x: x  # noqa: E731 - the adapter's input: NHWC memory seen as NCHW (channels-last strides)
    nchw = lambda x: x.contiguous()  # noqa: E731
    half = copy.deepcopy(seg32.module).to(torch.bfloat16)
    variants = {
        "fp32": (seg32.module, as_is, nullcontext),
        "fp32 + TF32 matmuls": (seg32.module, as_is, tf32),
        "bf16 autocast (the adapter)": (seg32.module, as_is, amp_bf16),
        "bf16 autocast, NCHW input": (seg32.module, nchw, amp_bf16),
        "bf16 weights, no autocast": (half, lambda x: x.to(torch.bfloat16).contiguous(), nullcontext),
    }
    out: dict[str, dict[str, float]] = {}
    for b in sorted({8, auto_b}):
        bs = batches_of(images, b)
        for name, (module, prep, ctx) in variants.items():
            t = forward_variant(module, seg32, bs, prep, ctx)
            out.setdefault(name, {})[f"batch {b}"] = len(images) / t
        say(f"model alone at batch {b}: " + ", ".join(f"{k} {v[f'batch {b}']:.1f}" for k, v in out.items())
            + " img/s")
    del half
    RESULTS["precision"] = out


# -- 2c. statistics fused vs unfused -------------------------------------------------------------------------


def time_and_peak(fn: Callable[[], Any], device: torch.device, reps: int = 5) -> dict[str, float]:
    """Median ms of fn() over `reps` (after one warm-up) and its peak device memory above what was allocated
    before it (0 on the CPU)."""
    fn()
    times, peak = [], 0
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            base = torch.cuda.memory_allocated(device)
            torch.cuda.reset_peak_memory_stats(device)
        times.append(timed(fn, device))
        if device.type == "cuda":
            peak = max(peak, torch.cuda.max_memory_allocated(device) - base)
    return {"ms": 1e3 * float(np.median(times)), "peak_MiB_above_input": peak / 2**20}


def bench_stats(device: torch.device, classes: int, size: int, n: int) -> None:
    """The statistics of [n, classes, size, size]: from probabilities (fused, unfused; NCHW and channels-last),
    and two paths from a model's 1/4-resolution logits: the scan's (upsample, softmax, `device_stats`) and the
    candidate (upsample, `begin_device_logit_stats`: no probability tensor), with their numbers compared."""
    proba = torch.softmax(torch.randn((n, classes, size, size), device=device), dim=1)
    last = proba.contiguous(memory_format=torch.channels_last)  # the layout the scan's upsampled logits had
    got = {}
    for name, fn in (("fused", lambda: device_stats(proba)), ("unfused", lambda: device_stats_unfused(proba)),
                     ("fused, channels-last input", lambda: device_stats(last)),
                     ("unfused, channels-last input", lambda: device_stats_unfused(last))):
        got[name] = time_and_peak(fn, device)
    del proba, last
    logits = torch.randn((n, classes, size // 4, size // 4), device=device) * 3  # SegFormer's 1/4-resolution output
    up = lambda low: torch.nn.functional.interpolate(low, size=(size, size), mode="bilinear",  # noqa: E731
                                                     align_corners=False)
    for name, low in (("upsample + softmax, NCHW logits", logits),
                      ("upsample + softmax, channels-last logits",
                       logits.contiguous(memory_format=torch.channels_last))):
        got[name] = time_and_peak(lambda low=low: torch.softmax(up(low), dim=1), device)
    paths = {"upsample + softmax + device_stats (the scan)": lambda: device_stats(torch.softmax(up(logits), 1)),
             "upsample + logit statistics (candidate)": lambda: begin_device_logit_stats(up(logits)).result()}
    for name, fn in paths.items():
        got[name] = time_and_peak(fn, device)
    full = up(logits)
    for name, fn in (("device_stats of the softmax", lambda: device_stats(torch.softmax(full, 1))),
                     ("logit statistics", lambda: begin_device_logit_stats(full).result())):
        got[name] = time_and_peak(fn, device)
    old, new = device_stats(torch.softmax(full, 1)), begin_device_logit_stats(full).result()
    got["logits vs softmax"] = {
        "argmax_equal": bool(np.array_equal(old.argmax, new.argmax)),
        "frac_equal": bool(np.array_equal(old.frac, new.frac)),
        "entropy_max_abs_diff": float(np.abs(old.entropy - new.entropy).max()),
        "maxprob_max_abs_diff": float(np.abs(old.maxprob - new.maxprob).max())}
    say(f"statistics of [{n}, {classes}, {size}, {size}]: " + ", ".join(
        f"{k} {v['ms']:.1f} ms (+{v['peak_MiB_above_input']:.0f} MiB)" for k, v in got.items() if "ms" in v)
        + f"; logits vs softmax: {got['logits vs softmax']}")
    RESULTS["stats"] = {"shape": [n, classes, size, size], **got}
    del logits, full


# -- 2d. fine-tuning vs a plain loop -------------------------------------------------------------------------


def plain_loop(module: torch.nn.Module, pairs: list[tuple[np.ndarray, np.ndarray]], seg: Any, batch: int,
               epochs: int, lr: float, precision: str) -> None:
    """A plain torch training loop: SGD, autocast, cross-entropy on upsampled logits, no checks, no syncs."""
    import torch.nn.functional as F

    dev = seg.device
    module.train()
    opt = torch.optim.SGD(module.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4)
    for _ in range(epochs):
        for s in range(0, len(pairs) - batch + 1, batch):
            ims = np.stack([p[0] for p in pairs[s:s + batch]])
            mks = torch.from_numpy(np.stack([p[1] for p in pairs[s:s + batch]]).astype(np.int64)).to(dev)
            x = seg.preprocess(ims, dev)
            with autocast(dev, precision):
                y = module(x)
            y = F.interpolate(y.float(), size=x.shape[-2:], mode="bilinear", align_corners=False)
            loss = F.cross_entropy(y, mks, ignore_index=255)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()


def bench_finetune(seg32: Any, images: list[np.ndarray], classes: int, batch: int, epochs: int) -> None:
    from blindspots.models.devices import training_precision
    from blindspots.training.replay import ReplayFinetuner

    dev = seg32.device
    rng = np.random.default_rng(0)
    pairs = [(im, np.kron(rng.integers(0, classes, (4, 4)), np.ones((im.shape[0] // 4, im.shape[1] // 4),
                                                                  np.int64)).astype(np.uint8)) for im in images]
    precision = training_precision("auto", dev)
    ft = ReplayFinetuner([1e-5], epochs=epochs, batch_size=batch, device=str(dev), progress=False, flip=False)
    steps = (len(pairs) // batch) * epochs
    got = {}
    for r in range(2):  # round 0 warms both up (cuDNN autotuning of the backward); round 1 is measured
        for name in (("ours", "plain") if r == 0 else ("plain", "ours")):
            module = copy.deepcopy(seg32.module)
            if name == "ours":  # the training loop of ReplayFinetuner.fit, without its validation pass
                t = timed(lambda: ft._train_one(module, pairs, 1e-5, None), dev)  # noqa: SLF001
            else:
                t = timed(lambda: plain_loop(module.to(dev), pairs, seg32, batch, epochs, 1e-5, precision), dev)
            got[name] = steps * batch / t
            del module
    say(f"fine-tuning ({precision}, batch {batch}, {steps} steps): ReplayFinetuner {got['ours']:.1f} img/s, plain "
        f"loop {got['plain']:.1f} img/s, ratio {got['ours'] / got['plain']:.3f}")
    RESULTS["finetune"] = {"precision": precision, "batch": batch, "steps": steps, "img_per_s": got,
                           "ratio": got["ours"] / got["plain"]}


# -- 2e. surprise maps vs the forward ------------------------------------------------------------------------


def bench_surprise(folder: Path, device: torch.device, images: list[np.ndarray], batch: int) -> None:
    from blindspots.surprise import MDSA
    from blindspots.surprise.image import surprise_heatmaps
    from blindspots.surprise.traces import TraceExtractor

    seg = load_model(f"{folder}?device={device.type}&batch_size={batch}")
    ext = TraceExtractor(seg)
    fit_x = np.stack(images[:min(8, len(images))])
    feat, y, _ = ext.forward_scores(fit_x)
    low = torch.nn.functional.interpolate(y, size=feat.shape[-2:], mode="bilinear").argmax(1).reshape(-1)
    traces = feat.permute(0, 2, 3, 1).reshape(-1, feat.shape[1])
    pick = torch.from_numpy(np.random.default_rng(0).choice(traces.shape[0], min(20000, traces.shape[0]),
                                                            replace=False)).to(traces.device)
    est = MDSA().fit(traces[pick].cpu().numpy(), low[pick].cpu().numpy())
    del feat, y, traces
    x = np.stack(images)
    forward = lambda: [ext.forward_scores(x[s:s + batch]) for s in range(0, len(x), batch)]  # noqa: E731
    maps = lambda: surprise_heatmaps(ext, est, x)  # noqa: E731
    forward()
    maps()  # warm-up
    tf, tm = [], []
    for r in range(2):
        for name in (("f", "m") if r == 0 else ("m", "f")):
            (tf if name == "f" else tm).append(timed(forward if name == "f" else maps, device))
    f, m = float(np.median(tf)), float(np.median(tm))
    say(f"surprise maps ({len(est.classes_)} classes modelled, d={est.n_features_in_}): maps {len(x) / m:.1f} "
        f"img/s, forward alone {len(x) / f:.1f} img/s, ratio {m / f:.3f}")
    RESULTS["surprise"] = {"images": len(x), "classes_modelled": int(len(est.classes_)), "d": int(est.n_features_in_),
                           "maps_img_per_s": len(x) / m, "forward_img_per_s": len(x) / f, "ratio": m / f}


# -- 2f. label scores from device probabilities --------------------------------------------------------------


def bench_labels(seg32: Any, images: list[np.ndarray], classes: int) -> None:
    try:
        from blindspots.labels import get_label_quality_scores
    except ImportError as exc:  # blindspots.labels imports scipy (its region finder)
        say(f"label scores: skipped, blindspots.labels needs {exc.name or exc}")
        RESULTS["labels"] = f"skipped: needs {exc.name or exc}"
        return

    rng = np.random.default_rng(1)
    masks = [np.kron(rng.integers(0, classes, (8, 8)), np.ones((im.shape[0] // 8, im.shape[1] // 8),
                                                              np.int64)).astype(np.uint8) for im in images]
    dev = seg32.device
    device_path = lambda: get_label_quality_scores(model=seg32, dataset=list(zip(images, masks)),  # noqa: E731
                                                   model_batch_size=8, verbose=False)
    host_path = lambda: get_label_quality_scores(  # noqa: E731 - what a GPU model cost before: every plane to host
        np.stack(masks), np.concatenate([seg32.predict_proba(np.stack(images[s:s + 8]))
                                         for s in range(0, len(images), 8)]), verbose=False)
    device_path()
    t_dev = timed(device_path, dev)
    t_host = timed(host_path, dev)
    say(f"label scores of {len(images)} images: device probabilities {len(images) / t_dev:.1f} img/s, probabilities "
        f"to the host {len(images) / t_host:.1f} img/s ({t_host / t_dev:.1f}x)")
    RESULTS["labels"] = {"images": len(images), "device_img_per_s": len(images) / t_dev,
                         "host_img_per_s": len(images) / t_host}


# -- 2g. decoding --------------------------------------------------------------------------------------------


def bench_decode(pool_root: Path, device: torch.device) -> None:
    files = sorted(pool_root.glob("*.jpg"))
    datas = [f.read_bytes() for f in files]
    n = len(datas)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    got = {}
    for w in sorted({1, 4, cores}):
        with ThreadPoolExecutor(w) as ex:
            list(ex.map(decode_image, datas[:w]))
            t = time.perf_counter()
            list(ex.map(decode_image, datas))
            got[f"Pillow, {w} threads"] = n / (time.perf_counter() - t)
    with ProcessPoolExecutor(cores, mp_context=multiprocessing.get_context("spawn")) as ex:  # no fork of CUDA
        list(ex.map(decode_image, datas[:cores]))
        t = time.perf_counter()
        list(ex.map(decode_image, datas, chunksize=8))
        got[f"Pillow, {cores} processes"] = n / (time.perf_counter() - t)
    try:
        from torchvision.io import decode_jpeg

        tensors = [torch.frombuffer(bytearray(d), dtype=torch.uint8) for d in datas]
        decode_jpeg(tensors[:8], device=str(device))
        for b in (8, 64):
            t = timed(lambda: [decode_jpeg(tensors[s:s + b], device=str(device)) for s in range(0, n, b)], device)
            got[f"torchvision decode_jpeg on {device.type}, {b} a call"] = n / t
    except Exception as exc:  # noqa: BLE001 - an optional decoder: report why it did not run
        got["torchvision decode_jpeg"] = f"failed: {type(exc).__name__}: {exc}"
    say("decode of the pool's JPEGs: " + ", ".join(f"{k} {v:.0f}" if isinstance(v, float) else f"{k} {v}"
                                                   for k, v in got.items()) + " img/s")
    RESULTS["decode"] = got


# -- main ----------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="pool size (512x512 JPEGs)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--tiny", action="store_true", help="tiny SegFormer, 24 images of 64x64, 8 classes: any machine")
    ap.add_argument("--skip", default="", help="comma-separated sections to skip: checks, scan, precision, stats, "
                    "finetune, surprise, labels, decode")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "blindspots-gpu-all")
    args = ap.parse_args()
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    size, classes, layout = (64, 8, TINY) if args.tiny else (512, 150, B2)
    n = 24 if args.tiny else args.n
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("blindspots.scan.api").setLevel(logging.ERROR)  # one model: "scan without competitors"
    logging.getLogger("blindspots.scan.engines.autobatch").setLevel(logging.INFO)  # the batch=auto choice
    logging.getLogger("blindspots.surprise").setLevel(logging.ERROR)  # a random model's few-trace classes
    logging.getLogger("blindspots.data.sources").setLevel(logging.ERROR)  # the checks' corrupt file, on purpose
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available() else
                          ("cpu" if args.device == "auto" else args.device))
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none (CPU run)"
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    say(f"device {device} ({gpu}); CPU {cpu_model()}, {cores} cores; torch {torch.__version__}; {load()}")
    RESULTS["machine"] = {"device": str(device), "gpu": gpu, "cpu": cpu_model(), "cores": cores,
                          "torch": torch.__version__, "load_start": os.getloadavg()}
    args.workdir.mkdir(parents=True, exist_ok=True)
    if "checks" not in skip:
        run_checks(device, args.workdir)
        say("checks done")
    pool = make_pool(args.workdir / f"pool-{n}-{size}", n, size, 0)
    folder = make_model(args.workdir / f"segformer-{'tiny' if args.tiny else 'b2'}-{classes}", layout, classes, 0)
    ids = sorted(pool.ids)
    images = [pool.load(i) for i in ids]
    models = {p: load_model(f"{folder}?device={device.type}&precision={p}&batch_size=64") for p in ("fp32", "bf16")}
    auto_b = auto_limits({"m": models["fp32"]}, lambda: (size, size)).max_images or 8
    say(f"model SegFormer {'tiny' if args.tiny else 'MiT-b2-like'}, {classes} classes; pool {n} JPEGs {size}x{size}; "
        f"batch_size=auto -> {auto_b}")
    sections = {
        "scan": lambda: bench_scan(models, pool, images, auto_b, 1 if args.tiny else args.rounds, args.workdir),
        "precision": lambda: bench_precision(models["fp32"], images, auto_b),
        "stats": lambda: bench_stats(device, classes, size, 8),
        "finetune": lambda: bench_finetune(models["fp32"], images[:64], classes, 8 if not args.tiny else 4,
                                           2),
        "surprise": lambda: bench_surprise(folder, device, images[:64], 16),
        "labels": lambda: bench_labels(models["fp32"], images[:16], classes),
        "decode": lambda: bench_decode(Path(pool.root), device),
    }
    for name, fn in sections.items():
        if name in skip:
            continue
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - one section failing leaves the others' figures
            say(f"section {name} failed: {type(exc).__name__}: {exc}")
            traceback.print_exc(limit=4)
            RESULTS[name] = f"failed: {type(exc).__name__}: {exc}"[:400]
        if device.type == "cuda":
            torch.cuda.empty_cache()
    RESULTS["machine"]["load_end"] = os.getloadavg()
    RESULTS["seconds"] = time.perf_counter() - T0
    summary()
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "gpu_all.json").write_text(json.dumps(RESULTS, indent=1, default=str))
        say(f"wrote {Path(out) / 'gpu_all.json'}")


def summary() -> None:
    print("\n== summary ==")
    for name, v in RESULTS.get("checks", {}).items():
        print(f"  {v.split(' ', 1)[0]:5s} {name}")
    scan = RESULTS.get("scan")
    if isinstance(scan, dict):
        for p, r in scan["img_per_s"].items():
            print(f"  {p}: scan {r['scan_auto']:.1f} img/s (batch {scan['auto_batch']}), model alone "
                  f"{r['model_auto']:.1f} -> {r['scan_auto'] / r['model_auto']:.2f}x (target >= 0.8); batch 8: scan "
                  f"{r['scan_b8']:.1f}, model alone {r['model_b8']:.1f}; forward + device statistics "
                  f"{r['stats_auto']:.1f}, from logits {r['logit_stats_auto']:.1f}")
            print("    scan variants: " + ", ".join(f"{k[len('scan_auto_'):]} {v:.1f}" for k, v in r.items()
                                                  if k.startswith("scan_auto_")))
    for key, label, target in (("finetune", "fine-tuning / plain loop", ">= 0.9"),
                               ("surprise", "surprise maps time / forward time", "<= 1.15")):
        if isinstance(RESULTS.get(key), dict):
            print(f"  {label}: {RESULTS[key]['ratio']:.3f} (target {target})")
    print(f"  total {RESULTS['seconds']:.0f} s; CPU {cpu_model()}; {load()}")


if __name__ == "__main__":
    main()
