"""Scan throughput on a GPU against the bare forward of the same model: a SegFormer-sized model at 512x512.

The model is transformers' `SegformerForSemanticSegmentation` with a MiT-b2-like configuration
(depths 3-4-6-3, hidden sizes 64-128-320-512, decoder 768; random weights, no download), 150 classes
(ADE20K, SegFormer-B2's 512x512 setting; `--classes 19` for Cityscapes' label space), saved with
`save_pretrained` and loaded through the spec grammar as a user would: `FOLDER?device=auto&precision=P`.
The pool: `--n` JPEG photos-like images (smooth random fields) of `--size` x `--size`, written once.

Per precision (fp32, bf16, fp16), in `--rounds` interleaved rounds (which of the two goes first
alternates, so that the machine's drift hits both alike):

1. the scan: `scan_pool` of the pool with the model (decode + pinned transfer + forward + float32
   softmax + statistics + Parquet shards + argmax PNGs), a fresh folder each time;
2. the peer, the bare forward: the same adapter's `predict_proba` on the same images, preloaded and
   cut into the same batches (what the scan cannot do without: transfer, forward, float32 softmax
   and the probabilities back in host memory);
3. the model alone: the module's forward under the same autocast, outputs left on the GPU;
4. forward + device statistics: `predict_proba_device` and the scan's `model_stats` of the tensor it
   leaves on the GPU (a GPU scan takes its statistics there and brings back argmax maps and a few
   numbers, not 150 float32 planes an image): the GPU work the scan cannot avoid.

Printed: seconds and images/s of each, scan / bare forward (target <= 1.10), the GPU's name, the CPU
model and `os.getloadavg()`. Asserts nothing about time.

Runs where only torch, torchvision, transformers, onnxruntime, pyarrow, pandas, numba, typer and
Pillow are installed (`pip install --no-deps -e .`; no Ray): the scan imports nothing else.

    python benchmarks/gpu_scan.py                      # on a CUDA machine: n=512, 512x512, 3 rounds
    python benchmarks/gpu_scan.py --tiny               # any machine: a tiny SegFormer at 64x64 (CPU here)
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from blindspots.data import ImagePool
from blindspots.models.devices import autocast
from blindspots.models.load import load_model
from blindspots.scan import scan_pool
from blindspots.scan.stats import model_stats
from blindspots.machine import cpu_model

B2 = {"depths": [3, 4, 6, 3], "hidden_sizes": [64, 128, 320, 512], "decoder_hidden_size": 768,
      "num_attention_heads": [1, 2, 5, 8], "sr_ratios": [8, 4, 2, 1]}
TINY = {"depths": [1, 1, 1, 1], "hidden_sizes": [8, 16, 32, 64], "decoder_hidden_size": 32,
        "num_attention_heads": [1, 1, 1, 1], "sr_ratios": [8, 4, 2, 1]}



def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def make_pool(root: Path, n: int, size: int, seed: int) -> ImagePool:
    """n JPEGs of size x size: smooth random colour fields (decode cost of real photos), written once."""
    if root.is_dir() and len(list(root.glob("*.jpg"))) == n:
        return ImagePool(root)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    for i in range(n):
        low = rng.integers(0, 256, (max(2, size // 16), max(2, size // 16), 3), dtype=np.uint8)
        img = Image.fromarray(low).resize((size, size), Image.BILINEAR)
        noise = rng.integers(-12, 13, (size, size, 3))
        Image.fromarray(np.clip(np.asarray(img, np.int16) + noise, 0, 255).astype(np.uint8)).save(
            root / f"img_{i:06d}.jpg", quality=90)
    return ImagePool(root)


def make_model(folder: Path, layout: dict, classes: int, seed: int) -> Path:
    """A randomly initialised SegFormer saved with save_pretrained (loaded back through a spec)."""
    from transformers import SegformerConfig, SegformerForSemanticSegmentation

    if (folder / "config.json").is_file():
        return folder
    torch.manual_seed(seed)
    model = SegformerForSemanticSegmentation(SegformerConfig(num_labels=classes, **layout))
    model.save_pretrained(folder)
    return folder


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def bare(seg, batches: list[np.ndarray]) -> float:
    """Seconds of predict_proba on every preloaded batch (probabilities back in host memory)."""
    t = time.perf_counter()
    for b in batches:
        seg.predict_proba(b)
    return time.perf_counter() - t


def device_peer(seg, batches: list[np.ndarray]) -> float:
    """Seconds of forward + softmax + the scan's statistics on the device (`model_stats` of the tensor
    `predict_proba_device` leaves there), argmax maps and numbers back in host memory: the GPU work a
    scan cannot do without, with no decode, no transfer of pixels in, no files written."""
    sync(seg.device)
    t = time.perf_counter()
    for b in batches:
        model_stats(seg.predict_proba_device(b))
    sync(seg.device)
    return time.perf_counter() - t


def model_only(seg, batches: list[np.ndarray]) -> float:
    """Seconds of the module's forward alone (same preprocessing and autocast; outputs stay on the device)."""
    sync(seg.device)
    t = time.perf_counter()
    with torch.no_grad():
        for b in batches:
            x = seg.preprocess(b, seg.device)
            with autocast(seg.device, seg.precision):
                seg.module(x)
    sync(seg.device)
    return time.perf_counter() - t


def scan(seg, pool: ImagePool, out: Path, batch_size: int, size: int) -> float:
    """Seconds of a fresh scan at `batch_size` images a batch: its pixel budget is set to that many images of
    `size`^2 (the default 1-megapixel budget cut 512x512 batches to 3 images, while the peers ran 8)."""
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    scan_pool(pool, {"m": seg}, out, target="m", batch_size=batch_size, max_pixels=batch_size * size * size,
              shard_size=256, progress=False)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=512, help="pool size")
    ap.add_argument("--size", type=int, default=512, help="image side (pixels)")
    ap.add_argument("--classes", type=int, default=150, help="classes of the head (150: ADE20K, 19: Cityscapes)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--precisions", default="fp32,bf16,fp16", help="comma-separated among fp32, bf16, fp16")
    ap.add_argument("--device", default="auto", help="auto (CUDA when present), cuda, cuda:N or cpu")
    ap.add_argument("--tiny", action="store_true", help="a tiny SegFormer at 64x64 on 32 images, 1 round "
                    "(checks the code path on any machine)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "blindspots-bench-gpu-scan")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.tiny:
        args.n, args.size, args.classes, args.rounds, args.batch_size = 32, 64, 8, 1, 8
    logging.getLogger("blindspots.scan.api").setLevel(logging.ERROR)  # "scan without competitors": one model here
    layout = TINY if args.tiny else B2
    args.workdir.mkdir(parents=True, exist_ok=True)
    pool = make_pool(args.workdir / f"pool-{args.n}-{args.size}-{args.seed}", args.n, args.size, args.seed)
    folder = make_model(args.workdir / f"segformer-{'tiny' if args.tiny else 'b2'}-{args.classes}", layout,
                        args.classes, args.seed)
    ids = sorted(pool.ids)
    images = [pool.load(i) for i in ids]
    batches = [np.stack(images[s:s + args.batch_size]) for s in range(0, len(images), args.batch_size)]
    precisions = [p.strip() for p in args.precisions.split(",") if p.strip()]
    models = {p: load_model(f"{folder}?device={args.device}&precision={p}&batch_size={args.batch_size}")
              for p in precisions}
    device = next(iter(models.values())).device
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "none (CPU run)"
    print(f"device {device} ({gpu}); CPU {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; {load()}")
    params = sum(p.numel() for p in models[precisions[0]].module.parameters()) / 1e6
    print(f"model: SegFormer {'tiny' if args.tiny else 'MiT-b2-like'} ({params:.1f} M parameters, random weights), "
          f"{args.classes} classes; pool {args.n} JPEGs {args.size}x{args.size}; batch {args.batch_size}")
    out = args.workdir / "scan-out"
    for p, seg in models.items():  # warm-up: cuDNN autotuning, allocator, the scan's first-call imports
        bare(seg, batches[:2])
        scan(seg, pool, out, args.batch_size, args.size)
    rows: dict[str, list[tuple[float, float, float]]] = {p: [] for p in precisions}
    for r in range(args.rounds):
        for p, seg in models.items():
            if r % 2:
                ts, tb = scan(seg, pool, out, args.batch_size, args.size), bare(seg, batches)
            else:
                tb = bare(seg, batches)
                ts = scan(seg, pool, out, args.batch_size, args.size)
            tm = model_only(seg, batches)
            td = device_peer(seg, batches)
            rows[p].append((ts, tb, tm, td))
            n = len(ids)
            print(f"round {r} {p}: scan {ts:7.2f} s ({n / ts:7.1f} img/s), bare forward {tb:7.2f} s ({n / tb:7.1f} "
                  f"img/s), forward + device statistics {td:7.2f} s ({n / td:7.1f} img/s), model alone {tm:7.2f} s "
                  f"({n / tm:7.1f} img/s); scan / bare {ts / tb:.3f}; {load()}", flush=True)
    n = len(ids)
    print(f"medians of {args.rounds} round(s), {n} images {args.size}x{args.size}, device {device} ({gpu}):")
    for p, got in rows.items():
        ts, tb, tm, td = (float(np.median([g[i] for g in got])) for i in range(4))
        ratio = float(np.median([g[0] / g[1] for g in got]))
        ratio_d = float(np.median([g[0] / g[3] for g in got]))
        print(f"  {p}: scan {n / ts:7.1f} img/s, bare forward {n / tb:7.1f} img/s, forward + device statistics "
              f"{n / td:7.1f} img/s, model alone {n / tm:7.1f} img/s; scan / bare forward = {ratio:.3f} "
              f"(target <= 1.10); scan / (forward + device statistics) = {ratio_d:.3f}")
    if len(rows) > 1 and "fp32" in rows:
        base = float(np.median([g[1] for g in rows["fp32"]]))
        print("  bare forward speed-up over fp32: " + ", ".join(
            f"{p} {base / float(np.median([g[1] for g in got])):.2f}x" for p, got in rows.items() if p != "fp32"))
    print(f"CPU {cpu_model()}; {load()}")


if __name__ == "__main__":
    main()
