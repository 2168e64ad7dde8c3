"""The host's ceiling: how fast the scan can feed a model that costs nothing, against a plain decode loop.

The model is a null segmenter: constant logits (2 classes), returned from a cached array (the scan takes
its statistics from them, as from any model of logits; `--probabilities`: constant probabilities), so the
scan's own work is all that is timed: reading and decoding the JPEGs (on `decode_workers` threads), hashing
them, batching, the statistics, the argmax PNGs (on the map pool), the Parquet shards. The peer is a
plain parallel decode loop with the same number of workers: `ImagePool.load_hashed` of every id mapped
over a thread pool (the same read, decode and hash), and over a process pool (to compare threads with
processes). Per worker count, `--rounds` interleaved rounds (the order alternates); medians printed, with
the CPU milliseconds each spends per image (this process and its pool's: on a shared machine the wall
time says as much about the neighbours as about the code, the CPU time does not).

Targets (goals): scan >= 0.9x the plain thread loop at the same worker count, scan(2 workers) >= 1.7x
scan(1 worker) on a 2-core machine. `--png-levels` also times the map encoder at each zlib level on
procedural scenes' label masks (what the map pool writes), to choose `scan.maps.PNG_COMPRESS_LEVEL`.

    python benchmarks/host_pipeline.py                         # 1 and 2 workers, 256 JPEGs of 512x512
    python benchmarks/host_pipeline.py --workers 1,2,4,8,16    # a bigger host: up to all cores
    python benchmarks/host_pipeline.py --png-levels            # the PNG level table only
    python benchmarks/host_pipeline.py --stats 2,19,150 --size 256   # statistics from logits against softmax
    python benchmarks/host_pipeline.py --per-thread            # CPU time of each of the scan's threads
"""
from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path

import numpy as np
from PIL import Image

from blindspots.data import ImagePool
from blindspots.machine import cpu_model
from blindspots.scan import scan_pool


class NullSegmenter:
    """Constant outputs for any batch, from a cache (cost nothing): float32 [n, 2, H, W] logits (log 0.75,
    log 0.25) where the scan takes a model's logits (`predict_logits`, as it does for an adapter of
    output="logits"), the probabilities (0.75, 0.25) otherwise (`logits=False`, or a scan that predates
    the logits path)."""

    num_classes = 2

    def __init__(self, logits: bool = True) -> None:
        self.output = "logits" if logits else "probabilities"
        self._cache: dict[tuple[int, ...], np.ndarray] = {}

    def _constant(self, images: np.ndarray, values: tuple[float, float]) -> np.ndarray:
        n, h, w = images.shape[:3]
        key = (n, h, w, *values)
        if key not in self._cache:
            p = np.empty((n, 2, h, w), np.float32)
            p[:, 0], p[:, 1] = values
            self._cache[key] = p
        return self._cache[key]

    def predict_proba(self, images: np.ndarray) -> np.ndarray:
        return self._constant(images, (0.75, 0.25))

    def predict_logits(self, images: np.ndarray, on_device: bool = False) -> np.ndarray:
        return self._constant(images, (float(np.log(0.75)), float(np.log(0.25))))


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished children (the process pool's workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def make_pool(root: Path, n: int, size: int) -> ImagePool:
    """n JPEGs (quality 90) of size x size: smooth random colour fields with noise, written once."""
    if not (root.is_dir() and len(list(root.glob("*.jpg"))) == n):
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        rng = np.random.default_rng(0)
        for i in range(n):
            low = rng.integers(0, 256, (max(2, size // 16), max(2, size // 16), 3), dtype=np.uint8)
            img = np.asarray(Image.fromarray(low).resize((size, size), Image.BILINEAR), np.int16)
            noisy = np.clip(img + rng.integers(-12, 13, (size, size, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(noisy).save(root / f"img_{i:06d}.jpg", quality=90)
    return ImagePool(root)


_POOLS: dict[str, ImagePool] = {}


def plain_threads(pool: ImagePool, ids: list[str], workers: int) -> float:
    t = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        for _ in ex.map(pool.load_hashed, ids):
            pass
    return time.perf_counter() - t


def plain_processes(pool: ImagePool, ids: list[str], workers: int) -> float:
    t = time.perf_counter()
    with ProcessPoolExecutor(workers) as ex:  # pixels come back pickled: what processes cost a scan
        for _ in ex.map(_load_pixels, [(str(pool.root), i) for i in ids], chunksize=8):
            pass
    return time.perf_counter() - t


def _load_pixels(args: tuple[str, str]) -> np.ndarray:
    root, image_id = args
    pool = _POOLS.get(root) or _POOLS.setdefault(root, ImagePool(root))
    return pool.load_hashed(image_id)[0]


def scan(pool: ImagePool, out: Path, workers: int, batch: int, size: int, logits: bool = True) -> float:
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    scan_pool(pool, {"m": NullSegmenter(logits)}, out, target="m", batch_size=batch, max_pixels=batch * size * size,
              shard_size=256, progress=False, decode_workers=workers)
    return time.perf_counter() - t


def stats_table(size: int, classes: list[int], reps: int = 3) -> None:
    """CPU ms an image of the host statistics of a logits model, as the scan took them before (the adapter's
    torch softmax, then `model_stats` of the probabilities) and now (`logit_stats` of the logits), on one
    thread; random logits [2, C, size, size]. Best of `reps`; the two interleaved."""
    import torch

    from blindspots.scan.logit_stats import logit_stats
    from blindspots.scan.stats import model_stats

    torch.set_num_threads(1)
    print(f"host statistics of 2 images {size}x{size}, one thread, CPU ms an image (best of {reps}):")
    for c in classes:
        z = torch.from_numpy(np.random.default_rng(c).normal(size=(2, c, size, size)).astype(np.float32) * 3)
        ways = {"softmax + model_stats": lambda: model_stats(torch.softmax(z, dim=1).numpy()),
                "logit_stats": lambda: logit_stats(z.numpy())}
        best = {k: np.inf for k in ways}
        for _ in range(reps):
            for k, f in ways.items():
                t = time.process_time()
                f()
                best[k] = min(best[k], 1e3 * (time.process_time() - t) / 2)
        print(f"  C={c}: " + ", ".join(f"{k} {v:.2f}" for k, v in best.items())
              + f"; {best['softmax + model_stats'] / best['logit_stats']:.2f}x; {load()}", flush=True)


def thread_cpu(pool: ImagePool, out: Path, workers: int, batch: int, size: int, logits: bool) -> None:
    """CPU ms an image of each of the scan's threads (by name) in one scan: each thread's CPU clock read
    from /proc/self/task every 20 ms (Linux; a thread's last 20 ms may be missed), printed largest first."""
    tick = os.sysconf("SC_CLK_TCK")

    def clock(tid: str) -> float | None:
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            return None
        return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

    before = {tid: clock(tid) or 0.0 for tid in os.listdir("/proc/self/task")}
    last: dict[str, float] = {}
    names: dict[str, str] = {}
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            names.update({str(t.native_id): t.name.rsplit("_", 1)[0] for t in threading.enumerate()})
            for tid in os.listdir("/proc/self/task"):
                v = clock(tid)
                if v is not None:
                    last[tid] = v
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, name="watcher")
    watcher.start()
    t = scan(pool, out, workers, batch, size, logits)
    done.set()
    watcher.join()
    per: dict[str, float] = {}
    for tid, v in last.items():
        name = names.get(tid, "other")
        if name != "watcher":
            per[name] = per.get(name, 0.0) + v - before.get(tid, 0.0)
    n = len(pool.ids)
    print(f"  {workers} worker(s): scan {n / t:.1f} img/s; CPU ms an image by thread: " + ", ".join(
        f"{k} {1e3 * v / n:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v > 0) + f"; {load()}",
        flush=True)


def png_levels(size: int, n: int) -> None:
    """Encode time and size of `n` procedural scenes' label masks at each zlib level."""
    from blindspots.data.scenes.generate import render_scene_arrays
    from blindspots.scan.png import encode_index_png

    _, masks, _ = render_scene_arrays(n, seed=0, distribution="pool", size=size)
    print(f"PNG encoding of {n} scene label masks {size}x{size} (uint8, {len(np.unique(masks))} classes):")
    for level in (0, 1, 2, 3, 6, 9):
        times = []
        for _ in range(3):
            t = time.perf_counter()
            sizes = [len(encode_index_png(m, level=level)) for m in masks]
            times.append(time.perf_counter() - t)
        ms = 1e3 * min(times) / n
        print(f"  level {level}: {ms:.2f} ms a map (best of 3), {np.mean(sizes) / 1024:.1f} KiB a map "
              f"(raw {size * size / 1024:.0f} KiB)")
    for level in (1, 6):  # zlib's run-length strategy on the same rows (filter byte 0, then the pixels)
        times = []
        for _ in range(3):
            t = time.perf_counter()
            sizes = [len(_rle(m, level)) for m in masks]
            times.append(time.perf_counter() - t)
        print(f"  level {level}, Z_RLE strategy (the zlib stream alone): {1e3 * min(times) / n:.2f} ms a map, "
              f"{np.mean(sizes) / 1024:.1f} KiB")


def _rle(mask: np.ndarray, level: int) -> bytes:
    """The IDAT payload of `encode_index_png`'s rows compressed with zlib's Z_RLE strategy."""
    import zlib

    raw = np.zeros((mask.shape[0], mask.shape[1] + 1), np.uint8)
    raw[:, 1:] = mask
    z = zlib.compressobj(level, zlib.DEFLATED, 15, 9, zlib.Z_RLE)
    return z.compress(raw.tobytes()) + z.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=256, help="pool size")
    ap.add_argument("--size", type=int, default=512, help="image side")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts (e.g. 1,2,4,8,16)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16, help="images a batch (pixel budget: batch x size^2)")
    ap.add_argument("--no-processes", action="store_true", help="skip the process-pool loop")
    ap.add_argument("--png-levels", action="store_true", help="only the PNG level table")
    ap.add_argument("--stats", default="", help="only the host statistics table, for these comma-separated class "
                    "counts (e.g. 2,19,150): softmax + model_stats against logit_stats")
    ap.add_argument("--per-thread", action="store_true",
                    help="only one scan per worker count, with the CPU time of each of its threads (Linux)")
    ap.add_argument("--probabilities", action="store_true",
                    help="the null model gives probabilities (the scan's path before logits)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "blindspots-bench-host")
    args = ap.parse_args()
    print(f"CPU {cpu_model()}, {os.cpu_count()} cores; {load()}")
    if args.png_levels:
        png_levels(args.size, 32)
        return
    if args.stats:
        stats_table(args.size, [int(c) for c in args.stats.split(",")])
        return
    pool = make_pool(args.workdir / f"pool-{args.n}-{args.size}", args.n, args.size)
    ids = sorted(pool.ids)
    workers = [int(w) for w in args.workers.split(",")]
    out = args.workdir / "scan"
    logits = not args.probabilities
    scan(pool, out, max(workers), args.batch, args.size, logits)  # warm-up: numba kernels, the page cache
    if args.per_thread:
        for w in workers:
            thread_cpu(pool, out, w, args.batch, args.size, logits)
        return
    plain_threads(pool, ids, max(workers))
    rows: dict[int, dict[str, list[float]]] = {w: {"scan": [], "threads": [], "processes": []} for w in workers}
    cpu: dict[int, dict[str, list[float]]] = {w: {"scan": [], "threads": [], "processes": []} for w in workers}
    for r in range(args.rounds):
        for w in (workers if r % 2 == 0 else workers[::-1]):
            order = ["scan", "threads", "processes"] if r % 2 == 0 else ["processes", "threads", "scan"]
            for kind in order:
                if kind == "processes" and args.no_processes:
                    continue
                c0 = cpu_seconds()
                t = {"scan": lambda: scan(pool, out, w, args.batch, args.size, logits),
                     "threads": lambda: plain_threads(pool, ids, w),
                     "processes": lambda: plain_processes(pool, ids, w)}[kind]()
                rows[w][kind].append(len(ids) / t)
                cpu[w][kind].append(1e3 * (cpu_seconds() - c0) / len(ids))
            print(f"round {r}, {w} worker(s): " + ", ".join(
                f"{k} {v[-1]:.1f} img/s ({cpu[w][k][-1]:.2f} CPU ms/img)" for k, v in rows[w].items() if v)
                + f"; {load()}", flush=True)
    print(f"medians of {args.rounds} rounds, {len(ids)} JPEGs {args.size}x{args.size}, null model "
          f"({'probabilities' if args.probabilities else 'logits'}), batch {args.batch}:")
    base = None
    for w in workers:
        m = {k: float(np.median(v)) for k, v in rows[w].items() if v}
        c = {k: float(np.median(v)) for k, v in cpu[w].items() if v}
        base = base or m["scan"]
        procs = f", process loop {m['processes']:.1f} ({c['processes']:.2f})" if "processes" in m else ""
        print(f"  {w} worker(s): scan {m['scan']:.1f} img/s ({c['scan']:.2f} CPU ms/img), plain thread loop "
              f"{m['threads']:.1f} ({c['threads']:.2f}){procs}; scan / thread loop {m['scan'] / m['threads']:.2f} "
              f"(target >= 0.9); scan / scan at {workers[0]} worker(s) {m['scan'] / base:.2f}")
    print(f"CPU {cpu_model()}; {load()}")


if __name__ == "__main__":
    main()
