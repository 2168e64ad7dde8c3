"""Label-issue engine against cleanlab 2.9, side by side on the same inputs.

Sizes: 50 x 256 x 256 with K = 10 and 20 x 512 x 1024 with K = 19 (Cityscapes-like),
and 30 x 256 x 512 with K = 19 ("softmin"); float32 probabilities from smooth random class
fields with ~8% of each mask relabelled in patches.
Every run happens in its own fresh process (inputs generated there from the seed), which reports
wall time and peak extra memory = peak RSS (VmHWM, reset after the inputs are built) minus RSS
before the call. cleanlab's default call forks worker processes whose memory is *not* included
(so its figure is a lower bound).

Printed per size: time and peak extra memory of
  1. cleanlab `segmentation.filter.find_label_issues(labels, pred_probs)` (default: n_jobs=None),
  2. the same with n_jobs=1,
  3. ours `blindspots.labels.find_label_issues` (in-memory arrays),
  4. softmin scores: cleanlab `rank.get_label_quality_scores` and ours, each in its own process, then
     both alternating in one process (4 x --repeat rounds; per-round ratios, robust to load swings),
and the ratios, each with os.getloadavg() beside it (targets: find_label_issues >= 40x
faster than 1 and >= 5x faster than 2; softmin >= 3x faster than cleanlab's at equal values), plus
whether the masks agree (identical at downsample=1 up to exact ties at the cut-off) and the largest
relative difference of the softmin image scores. Softmin runs are repeated (--repeat, median taken
in each process); our compiled kernels are loaded by a call on one image before the clock starts
(the cold first call, which loads them from numba's disk cache, is printed too).
Then streaming from a model + dataset (probabilities computed on the fly) for N and 3N images:
peak extra memory should stay flat.

Run: ``.venv/bin/python benchmarks/label_issues.py [--sizes small,medium,large] [--skip-default]``.
Asserts nothing about time; shared machines give noisy times, compare the ratios.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time

import numpy as np

SIZES = {
    "small": (8, 10, 64, 64),  # quick smoke run
    "medium": (50, 10, 256, 256),
    "large": (20, 19, 512, 1024),
    "softmin": (30, 19, 256, 512),  # the softmin figure
}


def _rss_kb(field: str = "VmRSS") -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        pass


def make_inputs(n: int, k: int, h: int, w: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Smooth class fields (upsampled coarse noise), labels = argmax with patches relabelled,
    probabilities = softmax of the field plus pixel noise. uint8 [N, H, W], float32 [N, K, H, W]."""
    rng = np.random.default_rng(seed)
    labels = np.empty((n, h, w), np.uint8)
    probs = np.empty((n, k, h, w), np.float32)
    f = 16
    for i in range(n):
        coarse = rng.normal(size=(k, h // f + 1, w // f + 1)).astype(np.float32)
        # bilinear-ish upsampling by repetition + a box blur keeps this fast for big images
        field = coarse.repeat(f, axis=1).repeat(f, axis=2)[:, :h, :w]
        field = (field + np.roll(field, f // 2, axis=1) + np.roll(field, f // 2, axis=2)) / 3
        lab = field.argmax(axis=0).astype(np.uint8)
        for _ in range(6):
            y, x = rng.integers(0, h), rng.integers(0, w)
            lab[y:y + h // 8, x:x + w // 8] = rng.integers(0, k)
        labels[i] = lab
        z = 3.0 * field + rng.normal(scale=0.7, size=field.shape).astype(np.float32)
        z -= z.max(axis=0, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=0, keepdims=True)
        probs[i] = z
    return labels, probs


class SyntheticModel:
    """A Segmenter whose probabilities are a deterministic function of the image (cheap)."""

    def __init__(self, k: int) -> None:
        self.num_classes = k
        self.w = np.random.default_rng(1).normal(size=(3, k)).astype(np.float32) / 30

    def predict_proba(self, images: np.ndarray) -> np.ndarray:
        z = images.astype(np.float32) @ self.w
        z -= z.max(-1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(-1, keepdims=True)
        return np.ascontiguousarray(np.moveaxis(z, -1, 1))


class SyntheticSet:
    """Dataset of N (image, mask) pairs generated on demand from the index (nothing kept)."""

    def __init__(self, n: int, h: int, w: int, k: int) -> None:
        self.n, self.h, self.w, self.k = n, h, w, k

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(i)
        img = rng.integers(0, 256, (self.h, self.w, 3), dtype=np.uint8)
        mask = rng.integers(0, self.k, (self.h, self.w), dtype=np.uint8)
        return img, mask


def worker(impl: str, size: str, seed: int, repeat: int = 1) -> dict:
    import warnings

    warnings.filterwarnings("ignore")
    # import both libraries before the clock and the memory baseline start
    import cleanlab.segmentation.filter  # noqa: F401
    import cleanlab.segmentation.rank  # noqa: F401

    import blindspots.labels  # noqa: F401
    if impl.startswith("stream"):
        n_mult = int(impl.removeprefix("stream"))
        n, k, h, w = SIZES[size]
        from blindspots.labels import find_label_issues

        model, data = SyntheticModel(k), SyntheticSet(n * n_mult, h, w, k)
        before = _rss_kb()
        _reset_peak()
        t = time.perf_counter()
        count = 0
        from blindspots.labels import LabelIssueFinder

        with LabelIssueFinder(verbose=False).fit(model=model, dataset=data, model_batch_size=4) as finder:
            for _, mask, _ in finder.iter_batches():  # consume masks one chunk at a time
                count += int(mask.sum())
        dt = time.perf_counter() - t
        return {"time": dt, "extra_mb": (_rss_kb("VmHWM") - before) / 1024, "count": count, "n": n * n_mult}
    labels, probs = make_inputs(*SIZES[size], seed=seed)
    if impl == "softmin_pair":  # both in one process, alternating: a load swing hits both alike
        from cleanlab.segmentation.rank import get_label_quality_scores as gc

        from blindspots.labels import get_label_quality_scores as go
        go(labels[:1], probs[:1], verbose=False)
        pair: dict[str, list[float]] = {"cleanlab": [], "ours": []}
        for r in range(4 * repeat):
            for name in (("cleanlab", "ours") if r % 2 else ("ours", "cleanlab")):
                t = time.perf_counter()
                (gc if name == "cleanlab" else go)(labels, probs, verbose=False)
                pair[name].append(time.perf_counter() - t)
        return pair
    cold = None
    if impl.startswith("ours"):  # load the compiled kernels (numba's disk cache) before the clock
        from blindspots.labels import find_label_issues as f0
        from blindspots.labels import get_label_quality_scores as g0

        t0 = time.perf_counter()
        (g0 if impl == "ours_softmin" else f0)(labels[:1], probs[:1], verbose=False)
        cold = time.perf_counter() - t0
    before = _rss_kb()
    _reset_peak()
    times = []
    for _ in range(repeat if "softmin" in impl else 1):
        t = time.perf_counter()
        if impl == "cleanlab_default":
            from cleanlab.segmentation.filter import find_label_issues as f
            res = f(labels, probs, verbose=False)
        elif impl == "cleanlab_n1":
            from cleanlab.segmentation.filter import find_label_issues as f
            res = f(labels, probs, verbose=False, n_jobs=1)
        elif impl == "ours":
            from blindspots.labels import find_label_issues as f
            res = f(labels, probs, verbose=False)
        elif impl == "cleanlab_softmin":
            from cleanlab.segmentation.rank import get_label_quality_scores as g
            res = g(labels, probs, verbose=False)[0]
        elif impl == "ours_softmin":
            from blindspots.labels import get_label_quality_scores as g
            res = g(labels, probs, verbose=False)[0]
        else:
            raise ValueError(f"impl: unknown {impl!r}")
        times.append(time.perf_counter() - t)
    out = {"time": float(np.median(times)), "times": times, "extra_mb": (_rss_kb("VmHWM") - before) / 1024,
           "cold": cold}
    if res.dtype == bool:
        out["count"] = int(res.sum())
        out["hash"] = hashlib.sha1(np.packbits(res).tobytes()).hexdigest()[:12]
    else:
        out["scores"] = [float(v) for v in res]
    return out


def run(impl: str, size: str, seed: int, timeout: int, repeat: int = 1) -> dict:
    cmd = [sys.executable, __file__, "--worker", impl, "--size", size, "--seed", str(seed), "--repeat", str(repeat)]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout}s"}
    if p.returncode != 0:
        return {"error": p.stderr.strip().splitlines()[-1] if p.stderr.strip() else f"rc {p.returncode}"}
    return json.loads(p.stdout.strip().splitlines()[-1])


def _fmt(r: dict) -> str:
    if "error" in r:
        return f"{r['error']}"
    cold = "" if r.get("cold") is None else f"  (cold first call on one image {r['cold']:.2f} s)"
    return f"{r['time']:8.3f} s  {r['extra_mb']:8.1f} MB extra{cold}"


def _load() -> str:
    return "load %.1f %.1f %.1f" % os.getloadavg()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="medium,large,softmin", help="comma list of: " + ",".join(SIZES))
    ap.add_argument("--repeat", type=int, default=5, help="softmin calls per process (median)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--skip-default", action="store_true", help="skip cleanlab's (slow) default n_jobs=None call")
    ap.add_argument("--timeout", type=int, default=3600, help="seconds per run")
    ap.add_argument("--stream-size", default="medium",
                    help="size for the streaming (model + dataset) check; 'none' skips it")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--size", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a.worker, a.size, a.seed, a.repeat)))
        return
    print(f"cpu cores visible: {os.cpu_count()}, {_load()}")
    for size in a.sizes.split(","):
        n, k, h, w = SIZES[size]
        print(f"\n== {size}: N={n} K={k} H={h} W={w} ({n * h * w / 1e6:.1f} M pixels, "
              f"pred_probs {n * k * h * w * 4 / 2**20:.0f} MB float32)")
        impls = (["cleanlab_default"] if not a.skip_default else []) + ["cleanlab_n1", "ours",
                                                                        "cleanlab_softmin", "ours_softmin"]
        res = {}
        for impl in impls:
            res[impl] = run(impl, size, a.seed, a.timeout, a.repeat)
            print(f"  {impl:18s} {_fmt(res[impl])}", flush=True)
        ours = res["ours"]
        if "error" in ours:
            continue
        for peer in ("cleanlab_default", "cleanlab_n1"):
            r = res.get(peer)
            if r and "error" not in r:
                print(f"  find_label_issues speed-up vs {peer:16s}: {r['time'] / ours['time']:6.1f}x   "
                      f"memory ours/{peer}: {ours['extra_mb'] / max(r['extra_mb'], 1e-9):.3f}   "
                      f"masks identical: {r.get('hash') == ours.get('hash')} "
                      f"(flagged {r['count']} vs {ours['count']})   [{_load()}]")
        cs, osm = res["cleanlab_softmin"], res["ours_softmin"]
        if "error" not in cs and "error" not in osm:
            a_, b_ = np.array(cs["scores"]), np.array(osm["scores"])
            rel = float(np.max(np.abs(b_ - a_) / np.abs(a_)))
            print(f"  softmin speed-up vs cleanlab: {cs['time'] / osm['time']:6.1f}x (medians of {a.repeat}; "
                  f"best {min(cs['times']) / min(osm['times']):.1f}x)   memory ours/cleanlab "
                  f"{osm['extra_mb'] / max(cs['extra_mb'], 1e-9):.3f}   image scores: max relative "
                  f"difference {rel:.1e}   [{_load()}]")
        pair = run("softmin_pair", size, a.seed, a.timeout, a.repeat)
        if "error" not in pair:
            ratio = np.array(pair["cleanlab"]) / np.array(pair["ours"])
            q1, q2, q3 = np.percentile(ratio, [25, 50, 75])
            print(f"  softmin interleaved in one process ({ratio.size} rounds): per-round speed-up median {q2:.1f}x "
                  f"(quartiles {q1:.1f}-{q3:.1f}x), best vs best {min(pair['cleanlab']) / min(pair['ours']):.1f}x "
                  f"(ours {min(pair['ours']) * 1e3:.0f} ms, cleanlab {min(pair['cleanlab']) * 1e3:.0f} ms)   [{_load()}]")
    if a.stream_size == "none":
        return
    print(f"\n== streaming from a model + dataset ({a.stream_size} images, computed on the fly)")
    rs = {m: run(f"stream{m}", a.stream_size, a.seed, a.timeout) for m in (1, 3)}
    for m, r in rs.items():
        print(f"  N x {m}: {_fmt(r)}")
    if all("error" not in r for r in rs.values()):
        print(f"  memory ratio 3N / N: {rs[3]['extra_mb'] / max(rs[1]['extra_mb'], 1e-9):.2f} (flat = ~1)")


if __name__ == "__main__":
    main()
