"""Scan throughput against the bare forward passes of the same models, measured in the same run.

A pool of generated 128x128 street scenes (default 2,000, `data.scenes.generate_scene_set`,
"pool" distribution) is scanned with a target and two competitors from the zoo (three
different designs). Printed:

1. images/s of the scan (decode + 3 forwards + statistics + pair distances + Parquet shards +
   3 argmax PNGs per image), fresh output folder;
2. the peer: the same models' `predict_proba` on the same images, preloaded in memory and cut
   into the same batches (bare forward). The pool is scanned as --segments sub-pools (8 by
   default, each its own scan folder with its shards and maps), and each segment's scan is
   timed right next to the bare forward on the same images, alternating which runs first:
   on a shared machine whose speed drifts by 10% from minute to minute (measured), timing one
   whole scan against bare runs minutes before and after measures the drift, not the scan;
3. ratio = scan time / bare forward time (target <= 1.10, torch on every core), the same ratio in process CPU
   time (all threads; far less sensitive to other jobs sharing the machine than wall time); the
   figure is the median of the segments' ratios (one slow minute moves a total, not a median),
   and the cost of the statistics alone on the same probabilities, as a share of the bare
   forward.

With --photos R (default 5; 0: off), a varied-size pool of real photographs (the opencv-doc
examples and scikit-image's bundled photos, each also as one seeded crop: >= 40 distinct sizes,
at most 1.5 MP; docs/data.md) is scanned with two callable models (`CallableSegmenter`
around two seeded zoo small_fcn nets, returning probabilities, so the scan validates every output pixel) in R
interleaved rounds against a bare loop of the same raw callables on the same same-size batches,
torch on --threads threads like the uniform row (printed with the row).

Peak memory: the last line is this process's peak RSS; `benchmarks/scan_memory.py` measures a
user's `blindspots scan` of photos in fresh processes, pixel budget against image count.

--also-inline also times the local engine run inline (`run_local(..., inline=True)`: decode,
forward, statistics and writes one after the other on the main thread) beside the default
reader/writer threads.

With --ray N, the first N images are also scanned on Ray (`engine="ray"`, needs blindspots[ray]),
in rounds that interleave: the local engine with 1 torch thread; a Ray cluster of 1 node x 1 CPU;
a Ray cluster of 2 nodes x 1 CPU (`ray.cluster_utils.Cluster` on this machine). Printed per round
and as medians of the per-round ratios: Ray 1x1 / local (target <= 1.2) and the speed-up of
2x1 over 1x1 (target >= 1.7), with `os.getloadavg()` beside them. Each Ray scan is timed whole,
as a user runs it against a cluster that is already up (`--address`): connecting, planning, the
pipeline's start-up (worker processes importing ray.data, the actors importing torch and loading
the models), every image, disconnecting; only the cluster's own start (`ray start`) is not timed.
The cluster is one in use: a tiny Ray Data job ran on it before (untimed), so Ray Data's detached
helper actors, made once per cluster, exist; --ray-cold times a fresh cluster's first job instead.
The driver and the Ray actors keep freed memory (`blindspots.allocator`, as `blindspots scan` does).
Start-up (pipeline start to first result) and the ratios after it are printed apart, as is the
pool size at which the fixed cost would be 10% of a 1x1 scan. From the 1- and 2-node medians (start-up,
per-node throughput after start-up, the driver's CPU per image) `ray_model.RayModel` projects the
speed-up on N nodes and the pool size from which the start-up is 5% of the scan (a model, printed
as such; docs/ray.md). Use N = 2000 (`--ray 2000`): the
pools the scan is for have 10^4-10^9 images, and at N = 400 the fixed cost (about 8 s on an idle
2-core machine) was half of the Ray scan.
All Ray traffic stays on 127.0.0.1 (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0).

Run: ``.venv/bin/python benchmarks/scan.py [--n 2000] [--threads 1] [--ray 2000] [--workdir DIR]``.
The scenes are cached in the work folder. Prints; asserts nothing about time. Machines shared
with other jobs give noisy times: compare the ratio, which is measured side by side.
"""
from __future__ import annotations

import argparse
import functools
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ray_model import RayModel  # noqa: E402 - benchmarks/ is on sys.path when this file runs

from blindspots.allocator import keep_freed_memory
from blindspots.data import ImagePool
from blindspots.models.adapters import TorchSegmenter
from blindspots.scan import model_stats, pair_distances, scan_pool
from blindspots.scan import api as scan_api
from blindspots.scan.engines import local as local_engine


def scene_pool(workdir: Path, n: int, seed: int) -> ImagePool:
    """Generate (once) n 128x128 scenes under workdir and return their images as a pool."""
    from blindspots.data.scenes import generate_scene_set

    root = workdir / f"scenes-{n}-{seed}"
    if not (root / "images").is_dir() or len(list((root / "images").glob("*.png"))) != n:
        shutil.rmtree(root, ignore_errors=True)
        generate_scene_set(root, n, seed=seed, distribution="pool", size=128, progress=True)
    return ImagePool(root / "images")


def zoo_models(names: list[str] | None, batch_size: int) -> dict[str, TorchSegmenter]:
    from blindspots.data.scenes import SCENE_CLASSES
    from blindspots.models import zoo

    preferred = ["lraspp_mnv3", "pspnet_r18", "small_fcn"]  # three designs, the fastest on CPU
    if not names:
        names = preferred if all(n in zoo.ZOO for n in preferred) else sorted(zoo.ZOO)[:3]
    c = SCENE_CLASSES.num_classes
    out = {}
    for i, name in enumerate(names):
        torch.manual_seed(i)
        out[name.lower().replace("-", "_")] = TorchSegmenter(zoo.build_model(name, c), c, batch_size=batch_size)
    return out


PHOTO_DIRS = [Path("/usr/share/doc/opencv-doc/examples/data")]
SKIMAGE_PHOTOS = ["astronaut", "coffee", "chelsea", "rocket", "camera", "coins", "hubble_deep_field",
                  "immunohistochemistry", "retina", "page", "text", "moon", "horse", "clock", "grass", "gravel",
                  "brick", "colorwheel", "cat"]
MAX_PIXELS = 1_500_000


def photo_pool(workdir: Path, seed: int) -> ImagePool:
    """Real photographs of many sizes (docs/data.md), written once under workdir as PNG:
    each photo as is (shrunk to at most MAX_PIXELS) and one seeded crop of it (50-100% per side)."""
    from PIL import Image

    root = workdir / f"photos-{seed}"
    if root.is_dir() and len(list(root.glob("*.png"))) >= 80:
        return ImagePool(root)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    photos: list[tuple[str, np.ndarray]] = []
    for d in PHOTO_DIRS:
        for f in sorted(d.glob("*.jpg")):
            photos.append((f.stem, np.asarray(Image.open(f).convert("RGB"))))
    try:
        import skimage.data as skd

        for name in SKIMAGE_PHOTOS:
            try:
                im = np.asarray(getattr(skd, name)())
            except Exception:  # noqa: BLE001 - some need a download (offline here)
                continue
            im = np.stack([im] * 3, -1) if im.ndim == 2 else im[..., :3]
            photos.append((f"sk_{name}", im.astype(np.uint8)))
    except ImportError:
        pass
    rng = np.random.default_rng(seed)
    for name, im in photos:
        h, w = im.shape[:2]
        if h * w > MAX_PIXELS:
            f = (MAX_PIXELS / (h * w)) ** 0.5
            im = np.asarray(Image.fromarray(im).resize((int(w * f), int(h * f)), Image.BILINEAR))
            h, w = im.shape[:2]
        Image.fromarray(im).save(root / f"{name}.png", compress_level=1)
        ch, cw = int(h * rng.uniform(0.5, 1)), int(w * rng.uniform(0.5, 1))
        y, x = int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1))
        Image.fromarray(im[y:y + ch, x:x + cw]).save(root / f"{name}_crop.png", compress_level=1)
    return ImagePool(root)


def raw_callables(archs: dict[str, str], num_classes: int) -> dict[str, Callable[[np.ndarray], np.ndarray]]:
    """Plain functions uint8 [N, H, W, 3] -> float32 probabilities [N, C, H, W] around zoo nets (what
    a user brings as a `module:function` model): the peer of the photo row calls these directly."""
    from blindspots.models import zoo
    from blindspots.models.adapters import TorchPreprocess

    pre = TorchPreprocess()
    out = {}
    for i, (key, arch) in enumerate(archs.items()):
        torch.manual_seed(100 + i)
        net = zoo.build_model(arch, num_classes).eval()

        def fn(batch: np.ndarray, net=net) -> np.ndarray:
            with torch.no_grad():
                y = net(pre(batch, torch.device("cpu")))
                y = y["out"] if isinstance(y, dict) else y
                if y.shape[-2:] != batch.shape[1:3]:
                    y = torch.nn.functional.interpolate(y, size=batch.shape[1:3], mode="bilinear",
                                                        align_corners=False)
                return torch.softmax(y, dim=1).numpy()
        out[key] = fn
    return out


def photo_rounds(workdir: Path, out: Path, args: argparse.Namespace) -> None:
    """Interleaved rounds: scan of the photo pool with two callable models / a bare loop of the same
    raw callables on the scan's batches (same-size groups of at most --batch-size per shard)."""
    from blindspots.models.adapters import CallableSegmenter

    full = photo_pool(workdir, args.seed)
    ids, seen = [], set()
    for i in sorted(full.ids):  # the first --photos-n photos of sizes not taken yet (every size once)
        shape = full.load(i).shape
        if shape not in seen and len(ids) < args.photos_n:
            ids.append(i)
            seen.add(shape)
    pool = SubPool(full, ids)
    images = {i: full.load(i) for i in ids}
    sizes = {im.shape[:2] for im in images.values()}
    c = 8
    fns = raw_callables({"fcn_a": "small_fcn", "fcn_b": "small_fcn"}, c)  # the zoo's cheapest net: 1.5 MP photos
    models = {n: CallableSegmenter(f, c, output="probabilities") for n, f in fns.items()}
    groups: dict[tuple, list[str]] = {}
    for s in range(0, len(ids), args.shard_size):  # the scan's batches: per shard, per size
        per: dict[tuple, list[str]] = {}
        for i in ids[s:s + args.shard_size]:
            per.setdefault(images[i].shape, []).append(i)
        for shape, members in per.items():
            for b in range(0, len(members), args.batch_size):
                groups[(s, shape, b)] = members[b:b + args.batch_size]
    batches = [np.stack([images[i] for i in g]) for g in groups.values()]

    def bare() -> tuple[float, float]:
        t, cpu = time.perf_counter(), time.process_time()
        for f in fns.values():
            for b in batches:
                f(b)
        return time.perf_counter() - t, time.process_time() - cpu

    def scan() -> tuple[float, float]:
        folder = out / "photos"
        shutil.rmtree(folder, ignore_errors=True)
        t, cpu = time.perf_counter(), time.process_time()
        scan_pool(pool, models, folder, target=next(iter(models)), batch_size=args.batch_size,
                  shard_size=args.shard_size, progress=False)
        return time.perf_counter() - t, time.process_time() - cpu

    for f in fns.values():  # warm-up (allocator, first-call overheads)
        f(batches[0])
    wall, cpu = [], []
    for r in range(args.photos):
        a, b = (scan(), bare()) if r % 2 else (bare(), scan())
        (ts, cs), (tb, cb) = (a, b) if r % 2 else (b, a)
        wall.append(ts / tb)
        cpu.append(cs / cb)
        print(f"photos round {r}: scan {ts:6.2f} s ({cs:6.2f} s CPU), bare loop {tb:6.2f} s ({cb:6.2f} s CPU); "
              f"ratio {wall[-1]:.3f} wall, {cpu[-1]:.3f} CPU; {load()}", flush=True)
    mp = max(h * w for h, w in sizes) / 1e6
    print(f"photo pool: {len(ids)} real photos, {len(sizes)} distinct sizes (up to {mp:.2f} MP); 2 callable models "
          f"(small_fcn, probabilities); torch threads {torch.get_num_threads()}")
    print(f"photos: scan / bare loop of the raw callables = {np.median(wall):.3f} wall, {np.median(cpu):.3f} CPU "
          f"(medians of {args.photos} rounds; target <= 1.10); {load()}")


def bare_forward(models: dict[str, TorchSegmenter], batches: list[np.ndarray]) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of every model's predict_proba on every batch."""
    t, c = time.perf_counter(), time.process_time()
    for m in models.values():
        for b in batches:
            m.predict_proba(b)
    return time.perf_counter() - t, time.process_time() - c


def stats_only(models: dict[str, TorchSegmenter], batches: list[np.ndarray], num_classes: int) -> float:
    """Time of model_stats + pair_distances alone, on probabilities computed beforehand (a sample)."""
    sample = batches[: max(1, len(batches) // 10)]
    probas = [[m.predict_proba(b) for m in models.values()] for b in sample]
    t = time.perf_counter()
    for per_model in probas:
        maps = [model_stats(p).argmax for p in per_model]
        for g in maps[1:]:
            pair_distances(maps[0], g, num_classes)
    return (time.perf_counter() - t) * len(batches) / len(sample)


class SubPool:
    """The images `ids` of a pool, as a pool (for scanning the pool in interleaved segments)."""

    def __init__(self, pool: ImagePool, ids: list[str]) -> None:
        self.root, self.ids, self._pool = pool.root, ids, pool

    def iter_items(self, ids):
        return self._pool.iter_items(ids)

    def iter_hashed_items(self, ids):
        return self._pool.iter_hashed_items(ids)  # the scan reads each file once, as on a whole ImagePool

    def content_hash(self, image_id: str) -> str:
        return self._pool.content_hash(image_id)  # the scan hashes each file, as on a whole ImagePool


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def ray_rounds(pool: ImagePool, models: dict[str, TorchSegmenter], ids: list[str], args: argparse.Namespace,
               out: Path) -> None:
    """Interleaved rounds: local engine (1 torch thread), Ray 1 node x 1 CPU, Ray 2 nodes x 1 CPU.

    Each Ray scan is timed as a user runs it against a cluster that is already up
    (`blindspots scan --engine ray --address HOST:PORT`): connecting to the cluster, planning, the
    pipeline's start-up (worker processes, imports, models), every image, the last shard's write
    and disconnecting. Only the cluster's own start (`ray start`, here `Cluster`) is left out."""
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"  # before Ray starts: bind to 127.0.0.1
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"  # no usage statistics
    import ray
    import ray.data as ray_data
    from ray.cluster_utils import Cluster

    if args.ray > len(ids):
        raise ValueError(f"--ray: expected at most the pool's {len(ids)} images (--n), got {args.ray}")
    part = ids[:args.ray]
    target = next(iter(models))
    torch.set_num_threads(1)
    # the Ray actors keep freed memory (blindspots.allocator); so does this process, for the local engine it is
    # compared with (permanent: the rows after the Ray rounds run with it too)
    kept = keep_freed_memory()
    print(f"freed memory kept (blindspots.allocator) in this process and in the Ray actors: {kept}")
    quiet = {"logging_level": "WARNING", "log_to_driver": False}

    driver_cpu: list[float] = []  # this process's CPU seconds during each Ray scan (the driver's share)

    def timed(folder: Path, **kw) -> float:
        shutil.rmtree(folder, ignore_errors=True)
        t, c = time.perf_counter(), time.process_time()
        scan_pool(SubPool(pool, part), models, folder, target=target, batch_size=args.batch_size,
                  shard_size=args.ray_shard_size, progress=False, **kw)
        if kw.get("engine") == "ray":
            driver_cpu.append(time.process_time() - c)
        return time.perf_counter() - t

    class Startup(logging.Handler):
        """Grabs the Ray engine's 'first result after A s, then N images in B s' log line."""

        def __init__(self) -> None:
            super().__init__(logging.INFO)
            self.last: tuple[float, float] = (float("nan"), float("nan"))

        def emit(self, record: logging.LogRecord) -> None:
            if record.msg.startswith("ray scan: first result"):
                self.last = (float(record.args[0]), float(record.args[2]))

    grab = Startup()
    engine_log = logging.getLogger("blindspots.scan.engines.ray")
    engine_log.addHandler(grab)
    engine_log.setLevel(logging.INFO)

    def on_ray(folder: Path, nodes: int, warm: bool = not args.ray_cold) -> tuple[float, float, float]:
        """(whole scan, pipeline start-up, the rest after the first result), seconds."""
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
        try:
            for _ in range(nodes - 1):
                cluster.add_node(num_cpus=1)
            # connect once untimed: check the nodes' addresses and, with warm (the default), run a tiny Ray Data
            # job, as on a cluster already in use: Ray Data's detached helper actors (stats, autoscaling
            # coordinator, usage, actor locations; ~1 s of CPU each) are made once per cluster, not per scan
            ray.init(address=cluster.address, **quiet)
            alive = [n for n in ray.nodes() if n["Alive"]]
            assert len(alive) == nodes and all(n["NodeManagerAddress"] == "127.0.0.1" for n in alive)
            if warm:  # a cluster in use: Ray Data's detached helper actors exist (created by any earlier job)
                ray_data.range(8, override_num_blocks=2).map_batches(lambda b: b).materialize()
            ray.shutdown()
            grab.last = (float("nan"), float("nan"))
            t = timed(folder, engine="ray", ray_address=cluster.address)  # connects, scans, disconnects
            return (t, *grab.last)
        finally:
            ray.shutdown()
            cluster.shutdown()

    rows: list[dict[str, float]] = []
    for r in range(args.ray_rounds):
        t_local = timed(out / "ray-local")
        t1, s1, w1 = on_ray(out / "ray-1x1", 1)
        t2, s2, w2 = on_ray(out / "ray-2x1", 2)
        rows.append({"r11": t1 / t_local, "r21": t1 / t2, "s1": s1, "w1": w1, "o1": t1 - s1 - w1, "s2": s2,
                     "w2": w2, "o2": t2 - s2 - w2, "a11": w1 / t_local, "a21": w1 / w2})
        print(f"ray round {r}: {len(part)} images, shards of {args.ray_shard_size}; local engine (1 torch thread) "
              f"{t_local:6.2f} s; Ray 1x1 CPU {t1:6.2f} s (connect+plan+disconnect {t1 - s1 - w1:.1f} s, "
              f"start-up {s1:.1f} s, rest {w1:.1f} s); Ray 2x1 CPU {t2:6.2f} s ({t2 - s2 - w2:.1f} + {s2:.1f} + "
              f"{w2:.1f} s); Ray 1x1 / local {rows[-1]['r11']:.3f}, speed-up 2x1 / 1x1 {rows[-1]['r21']:.3f}; "
              f"after start-up: {rows[-1]['a11']:.3f} and {rows[-1]['a21']:.3f}; {load()}", flush=True)

    def med(key: str) -> float:
        return float(np.median([row[key] for row in rows]))

    print(f"Ray 1 node x 1 CPU / local engine (1 torch thread): median {med('r11'):.3f} (target <= 1.2); {load()}")
    print(f"Ray 2 nodes x 1 CPU / 1 node x 1 CPU speed-up: median {med('r21'):.3f} (target >= 1.7); {load()}")
    print(f"whole scans above (connect, plan, start-up, every image, disconnect); {len(part)} images, medians of "
          f"{len(rows)} rounds. Start-up (pipeline start to first result): 1x1 {med('s1'):.1f} s, 2x1 "
          f"{med('s2'):.1f} s; connect + plan + disconnect (1x1) {med('o1'):.1f} s")
    print(f"after start-up only (from the first result on; NOT what a user waits for): Ray 1x1 / local engine "
          f"{med('a11'):.3f}, 2x1 speed-up {med('a21'):.3f}")
    s1, w1, o1 = med("s1"), med("w1"), med("o1")
    if w1 > 0.05 * (s1 + w1):  # the rest is measurable: more than the first shard's results came later
        fixed = s1 + o1
        print(f"fixed cost of a Ray 1x1 scan (start-up + connect/plan/disconnect) {fixed:.1f} s = "
              f"{fixed / (fixed + w1):.0%} of this scan of {len(part)} images; it would be 10% from about "
              f"{9 * fixed * len(part) / w1:,.0f} images (the rate after start-up); {load()}")
    n, f1, f2 = len(part), med("s1") + med("o1"), med("s2") + med("o2")
    r1, r2 = med("w1") / n, med("w2") / n  # seconds an image after start-up
    if r1 > 1.7 * r2:  # the speed-up (f1 + r1 N) / (f2 + r2 N) reaches 1.7 at this N (a straight-line model)
        print(f"from these fixed costs (1x1 {f1:.1f} s, 2x1 {f2:.1f} s) and rates after start-up (1x1 {r1 * 1e3:.1f}, "
              f"2x1 {r2 * 1e3:.1f} ms an image), the 2x1 speed-up would reach 1.7 from about "
              f"{max(0.0, (1.7 * f2 - f1) / (r1 - 1.7 * r2)):,.0f} images (an estimate, not a measurement)")
    else:
        print(f"after start-up 2x1 is {r1 / r2:.2f}x 1x1: the 2x1 speed-up cannot reach 1.7 at any pool size here")
    print("(start-up = from the Ray pipeline's start to its first result: worker processes starting and importing "
          "ray.data, the actors importing torch and loading the models, the first batch's decode and forward; paid "
          "once per scan)")
    model = RayModel.measured(f1, f2, med("w1"), med("w2"), n, float(np.median(driver_cpu)) / n)
    for line in model.lines():
        print(line)
    print(f"(a model, not a measurement: nodes like these with their own cores; see benchmarks/ray_model.py; "
          f"measured {load()} on {cpu_model()})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="pool size (>= 2000 for the reported figure)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--shard-size", type=int, default=256)
    ap.add_argument("--segments", type=int, default=8,
                    help="the pool is scanned as this many sub-pools, each timed right next to the bare forward on "
                         "the same images (alternating which goes first), so machine drift hits both alike")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--models", nargs="*", default=None, help="zoo names (default: the first three)")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "blindspots-bench-scan")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ray", type=int, default=0,
                    help="also time the Ray engine on the first N images (0: not; 2000 for the reported figure)")
    ap.add_argument("--ray-rounds", type=int, default=3)
    ap.add_argument("--ray-shard-size", type=int, default=32,
                    help="shard size of the Ray rounds (all three engines): shards are Ray's unit of parallelism")
    ap.add_argument("--ray-cold", action="store_true",
                    help="time each Ray scan as a fresh cluster's first Ray Data job (default: a cluster in use)")
    ap.add_argument("--ray-only", action="store_true", help="skip the local scan / bare forward segments")
    ap.add_argument("--photos", type=int, default=5, help="rounds of the varied-size real-photo row (0: not)")
    ap.add_argument("--photos-n", type=int, default=48, help="photos in that row (each of its own size)")
    ap.add_argument("--also-inline", action="store_true",
                    help="also time the local engine inline (no reader/writer threads) beside the default")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.workdir.mkdir(parents=True, exist_ok=True)

    pool = scene_pool(args.workdir, args.n, args.seed)
    models = zoo_models(args.models, args.batch_size)
    target = next(iter(models))
    num_classes = next(iter(models.values())).num_classes
    ids = sorted(pool.ids)
    for m in models.values():  # warm-up (allocator, first-call overheads)
        m.predict_proba(np.stack([pool.load(i) for i in ids[:args.batch_size]]))

    out = args.workdir / "scan-out"
    shutil.rmtree(out, ignore_errors=True)
    if args.ray:
        ray_rounds(pool, models, ids, args, out)
        if args.ray_only:
            return
        torch.set_num_threads(args.threads)  # the Ray rounds ran with 1 torch thread: the rows below use --threads
    if args.photos:
        photo_rounds(args.workdir, out, args)
    seg = -(-len(ids) // max(1, args.segments))
    scan = scan_cpu = bare = bare_cpu = 0.0
    alt: list[tuple[float, float]] = []  # inline engine / bare, per segment (--also-inline)
    per: list[tuple[float, float]] = []  # scan / bare per segment (wall, CPU): their medians are the figure
    all_batches: list[np.ndarray] = []
    for j, s in enumerate(range(0, len(ids), seg)):
        part = ids[s:s + seg]
        images = np.stack([pool.load(i) for i in part])  # preloaded for the peer
        batches = [images[b:b + args.batch_size] for b in range(0, len(images), args.batch_size)]
        all_batches += batches[:1]

        def run_scan() -> tuple[float, float]:
            shutil.rmtree(out / f"segment-{j:02d}", ignore_errors=True)  # a fresh folder every time
            t, c = time.perf_counter(), time.process_time()
            scan_pool(SubPool(pool, part), models, out / f"segment-{j:02d}", target=target,
                      batch_size=args.batch_size, shard_size=args.shard_size, progress=False)
            return time.perf_counter() - t, time.process_time() - c

        first, second = (run_scan, lambda: bare_forward(models, batches)) if j % 2 else \
            (lambda: bare_forward(models, batches), run_scan)
        def run_inline() -> tuple[float, float]:
            scan_api.run_local = functools.partial(local_engine.run_local, inline=True)
            try:
                return run_scan()
            finally:
                scan_api.run_local = local_engine.run_local

        inline_first = run_inline() if args.also_inline and j % 2 else None  # its place alternates too
        a, b = first(), second()
        (ts, cs), (tb, cb) = (a, b) if j % 2 else (b, a)
        scan, scan_cpu, bare, bare_cpu = scan + ts, scan_cpu + cs, bare + tb, bare_cpu + cb
        per.append((ts / tb, cs / cb))
        extra = ""
        if args.also_inline:
            ti, ci = inline_first or run_inline()
            alt.append((ti / tb, ci / cb))
            extra = f"; inline engine {ti:7.2f} s, ratio {ti / tb:.3f} ({ci / cb:.3f} CPU)"
        print(f"segment {j}: {len(part)} images, scan {ts:7.2f} s, bare forward {tb:7.2f} s, ratio "
              f"{ts / tb:.3f} ({cs / cb:.3f} CPU){extra}; {load()}", flush=True)
    stats = stats_only(models, all_batches, num_classes) * len(ids) / (len(all_batches) * args.batch_size)

    n = len(ids)
    print(f"pool: {n} scenes 128x128; models: {', '.join(models)} (target {target}); "
          f"batch {args.batch_size}; torch threads {args.threads}; {args.segments} interleaved segments; "
          f"local engine with reader/writer threads")
    print(f"scan:          {scan:8.2f} s   {n / scan:8.1f} images/s   (decode + 3 forwards + statistics + "
          f"pair distances + Parquet shards + 3 argmax PNGs per image)")
    print(f"bare forward:  {bare:8.2f} s   {n / bare:8.1f} images/s   (predict_proba on preloaded images)")
    print(f"ratio of the totals scan / bare forward = {scan / bare:.3f}; CPU time (all threads of this process): "
          f"scan {scan_cpu:.2f} s, bare {bare_cpu:.2f} s, ratio {scan_cpu / bare_cpu:.3f}   [{load()}]")
    print(f"uniform: scan / bare forward = {np.median([r[0] for r in per]):.3f} wall, "
          f"{np.median([r[1] for r in per]):.3f} CPU (medians of the {len(per)} segments' ratios; target <= 1.10)"
          f"   [{load()}]")
    if alt:
        print(f"inline engine (no reader/writer threads) / bare forward: median {np.median([a[0] for a in alt]):.3f} "
              f"wall, {np.median([a[1] for a in alt]):.3f} CPU   [{load()}]")
    print(f"statistics alone (stats + 2 pair distances, estimated on a sample) = "
          f"{stats:.2f} s = {stats / bare:.3f} of the bare forward")
    import resource

    # the whole benchmark's peak (every scan and bare forward above, in this process); a user's scan
    # of photos, budget against image count, side by side in fresh processes: benchmarks/scan_memory.py
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
