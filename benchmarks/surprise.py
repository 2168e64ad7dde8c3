"""Surprise-adequacy throughput, each figure side by side with a peer measured in the same run.

1. MDSA pixels/s on generic traces at d = 64 and 256 (10,000 reference traces per class), against
   the direct formula sqrt(diag((A - mu) S^-1 (A - mu)^T)) with numpy, and the matmul bound (the
   whitening matmul alone: 2 d^2 flops per trace; the fastest of one whole-array call, cache blocks on
   torch's threads and cache blocks split over Python threads) measured on the same traces, in rounds
   interleaved with ours; with the load average.
2. MDSA output pixels/s on a segmentation heatmap (features at 1/8 resolution, fused path).
3. LSA pixels/s against ``scipy.stats.gaussian_kde.logpdf`` on the same inputs (values compared).
4. Overhead of per-pixel MDSA during a segmentation forward pass: time(forward + hook + argmax + MDSA for
   every pixel) / time(bare ``TorchSegmenter.predict_proba``), and / time(the forward alone: logits at
   output resolution, no softmax), for zoo models trained briefly on day scenes
   (checkpoints kept in ``--workdir``) and scored on broad-pool scenes, so that they predict several
   classes per image as real models do; MDSA fitted on their traces with the paper's sampler defaults.

Run: ``.venv/bin/python benchmarks/surprise.py [--quick] [--only forward]``. Prints; asserts nothing about time.
The machine is shared: numbers are noisy, ratios are what to compare.
"""
from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np
import torch
from scipy.stats import gaussian_kde

from blindspots.models.adapters import TorchSegmenter
from blindspots.surprise import LSA, MDSA, TraceExtractor, surprise_heatmaps
from blindspots.surprise._threads import run_split, split_threads
from blindspots.surprise.estimators import mdsa_block_rows
from blindspots.surprise.fused import fused_mdsa_map
from blindspots.machine import cpu_model


def best_time(fn, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def reference(n: int, d: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    mix = np.eye(d) + rng.normal(size=(d, d)) / (2 * np.sqrt(d))  # correlated, well-conditioned
    x = (rng.normal(size=(n * k, d)) @ mix + np.repeat(rng.normal(size=(k, d)), n, axis=0)).astype(np.float32)
    return x, np.repeat(np.arange(k), n)


def bench_mdsa(d: int, n_ref: int, m: int, rounds: int = 5) -> None:
    x, y = reference(n_ref, d, 2, seed=d)
    est = MDSA().fit(x, y)
    q = x[:1] + np.random.default_rng(1).normal(size=(m, d)).astype(np.float32)
    cls = np.zeros(m, dtype=np.int64)
    xc = x[y == 0].astype(np.float64)
    inv, mu = np.linalg.inv(np.cov(xc, rowvar=False)), xc.mean(0)
    sub = q[:m // 4].astype(np.float64)
    direct = lambda: np.sqrt(np.einsum("ij,jk,ik->i", sub - mu, inv, sub - mu))  # noqa: E731
    t_direct = best_time(direct) * 4
    err = np.max(np.abs(est.score(sub, cls[:len(sub)]) - direct()) / direct())
    # the ceiling: the whitening matmul alone (2 d^2 flops per trace), the fastest of three ways: one
    # whole-array call, our cache blocks on torch's threads, our cache blocks split over Python threads
    # with one torch thread each (how ours runs); interleaved with ours in rounds, so load swings hit all
    qt, wt, rows = torch.from_numpy(q), torch.from_numpy(est.whiten_[0]), mdsa_block_rows(d)

    def blocks(lo: int, hi: int) -> None:
        buf = torch.empty(rows, d)
        for s in range(lo, hi, rows):
            e = min(hi, s + rows)
            torch.mm(qt[s:e], wt, out=buf[:e - s])

    runs = {"ours": lambda: est.score(q, cls), "whole": lambda: torch.mm(qt, wt), "blocked": lambda: blocks(0, m),
            "split": lambda: run_split(m, split_threads(m, 2 * rows), blocks, align=rows)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for _ in range(rounds):
        for k, fn in runs.items():
            times[k].append(best_time(fn, repeat=1))
    t_ours = min(times["ours"])
    t_mm = min(min(times[k]) for k in ("whole", "blocked", "split"))
    per_round = np.median(np.min([times[k] for k in ("whole", "blocked", "split")], axis=0) / np.array(times["ours"]))
    note = " (eigenvalue floor used: values differ)" if est.regularised_ else ""
    print(f"MDSA d={d:3d}: {m / t_ours / 1e6:7.2f} M traces/s | direct numpy formula {m / t_direct / 1e6:6.2f} M/s "
          f"| ratio {t_direct / t_ours:5.1f}x | max rel diff {err:.1e}{note}   [{_load()}]")
    best = {k: f"{m / min(v) / 1e6:.2f}" for k, v in times.items() if k != "ours"}
    print(f"matmul bound at d={d}: {m / t_mm / 1e6:.2f} M traces/s ({2 * d * d * m / t_mm / 1e9:.0f} GFLOP/s float32; "
          f"whole / blocked / split {best['whole']} / {best['blocked']} / {best['split']} M/s) | ours at "
          f"{t_mm / t_ours:.0%} of it (best of {rounds} rounds; median per-round ratio {per_round:.0%})   [{_load()}]")


def _load() -> str:
    return "load %.1f %.1f %.1f" % os.getloadavg()


def bench_heatmap(d: int, n_ref: int, size: int, batch: int) -> None:
    x, y = reference(n_ref, d, 4, seed=d + 1)
    est = MDSA().fit(x, y)
    rng = np.random.default_rng(0)
    feats = torch.from_numpy(rng.normal(size=(batch, d, size // 8, size // 8)).astype(np.float32))
    pred = np.repeat(np.repeat(rng.integers(0, 4, (batch, size // 8, size // 8)), 8, 1), 8, 2)
    t_fused = best_time(lambda: fused_mdsa_map(est, feats, pred))
    up = torch.nn.functional.interpolate(feats, size=(size, size), mode="bilinear", align_corners=False)
    traces = up.permute(0, 2, 3, 1).reshape(-1, d).numpy()
    t_up = best_time(lambda: est.score(traces, pred.reshape(-1)), repeat=1)
    px = batch * size * size
    print(f"MDSA heatmap d={d:3d} ({size}x{size}, features 1/8): fused {px / t_fused / 1e6:7.2f} M px/s | "
          f"upsample-then-score {px / t_up / 1e6:6.2f} M px/s | ratio {t_up / t_fused:5.1f}x")


def bench_lsa(d: int, n_ref: int, m_scipy: int, m_ours: int, dtype: str = "float64") -> None:
    x, y = reference(n_ref, d, 1, seed=7)
    est = LSA(var_threshold=None, dtype=dtype).fit(x, y)
    q = x[:m_ours] + np.random.default_rng(2).normal(scale=0.5, size=(m_ours, d)).astype(np.float32)
    cls = np.zeros(m_ours, dtype=np.int64)
    kde = gaussian_kde(x.T.astype(np.float64))
    t_scipy = best_time(lambda: kde.logpdf(q[:m_scipy].T.astype(np.float64)), repeat=1)
    t_ours = best_time(lambda: est.score(q, cls), repeat=2)
    ref = -kde.logpdf(q[:m_scipy].T.astype(np.float64))
    err = np.max(np.abs(est.score(q[:m_scipy], cls[:m_scipy]) - ref) / np.abs(ref))
    r_s, r_o = m_scipy / t_scipy, m_ours / t_ours
    print(f"LSA  d={d:3d}, {n_ref} refs, {dtype}: {r_o:9.0f} px/s | scipy gaussian_kde.logpdf {r_s:8.0f} px/s | "
          f"ratio {r_o / r_s:5.1f}x | max rel diff {err:.1e}")


def trained_segmenter(arch: str, size: int, epochs: int, workdir: Path, batch: int
                      ) -> tuple[TorchSegmenter, tuple[np.ndarray, np.ndarray]]:
    """A zoo model trained briefly on 320 day scenes (checkpointed in workdir: a rerun resumes or reuses it),
    so it predicts several classes per image as a real model does; returns it with its training set."""
    from blindspots.data.scenes import SCENE_CLASSES, render_scene_arrays
    from blindspots.training.segmentation import fit_segmenter
    from blindspots.models.zoo import build_model

    images, masks, _ = render_scene_arrays(320, seed=0, distribution="train", size=size)
    torch.manual_seed(0)
    module = build_model(arch, len(SCENE_CLASSES))
    t = time.perf_counter()
    fit_segmenter(module, (images, masks), epochs=epochs, batch_size=16, seed=0, arch=arch, classes=SCENE_CLASSES,
                  checkpoint_path=workdir / f"{arch}-{size}px-{epochs}ep.pt", progress=False)
    print(f"  ({arch}: trained or reloaded in {time.perf_counter() - t:.0f} s)")
    module.eval()
    return TorchSegmenter(module, len(SCENE_CLASSES), batch_size=batch), (images, masks)


def bench_forward(arch: str, size: int, batch: int, epochs: int, workdir: Path, rounds: int = 31) -> None:
    from blindspots.data.scenes import render_scene_arrays
    from blindspots.surprise.fused import fused_argmax_mdsa_map
    from blindspots.surprise.image import collect_fit_traces

    seg, (images, masks) = trained_segmenter(arch, size, epochs, workdir, batch)
    ex = TraceExtractor(seg)
    x, y = collect_fit_traces(ex, list(zip(images, masks)), progress=False)  # paper defaults: <= 10,000 / class
    est = MDSA().fit(x, y)
    # scored on the broad pool (night, scale, colour shifts ...): a batch of 8 predicts several classes
    imgs = render_scene_arrays(batch, seed=5, distribution="broad", size=size)[0]
    feat, _ = ex.forward(imgs)
    seg.predict_proba(imgs)  # warm-up (and numba's compile or cache load)
    _, pred = surprise_heatmaps(ex, est, imgs)
    def logits() -> torch.Tensor:  # the forward alone: logits at output resolution, no softmax, no copy out
        y = seg.forward_tensor(imgs)
        return y if y.shape[-2:] == (size, size) else torch.nn.functional.interpolate(
            y, size=(size, size), mode="bilinear", align_corners=False)

    def kernel_time() -> float:  # the fused map alone, timed right after a forward (as in use)
        feat_b, y, _ = ex.forward_scores(imgs, None)
        t0 = time.perf_counter()
        fused_argmax_mdsa_map(est, feat_b, y, mode=ex.interpolation, align_corners=ex.align_corners,
                              num_classes=ex.num_classes)
        return time.perf_counter() - t0

    kernel_time()  # compile or cache load
    runs = {"proba": lambda: seg.predict_proba(imgs), "logits": logits, "sa": lambda: surprise_heatmaps(ex, est, imgs)}
    times: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(rounds):  # interleaved, rotating which goes first, so drift hits all alike
        order = list(runs)[r % len(runs):] + list(runs)[:r % len(runs)]
        for k in order:
            times[k].append(best_time(runs[k], repeat=1))
    med = {k: float(np.median(v)) for k, v in times.items()}
    sa = np.array(times["sa"])

    def ratio(peer: str) -> str:  # per-round ratios: the machine's speed swings by up to 2x within seconds,
        r = sa / np.array(times[peer])  # but the three runs of a round are a few hundred ms apart
        q1, q2, q3 = np.percentile(r, [25, 50, 75])
        return f"{q2:5.3f} (quartiles {q1:5.3f}-{q3:5.3f}; ratio of medians {med['sa'] / med[peer]:5.3f})"

    per_image = np.mean([np.unique(p).size for p in pred])
    print(f"forward overhead ({arch} trained {epochs} epochs, {batch}x{size}x{size} broad-pool scenes, layer "
          f"{ex.layer}, d={feat.shape[1]} ({est.kept_features_.size} kept), features {tuple(feat.shape[-2:])}, "
          f"{np.unique(pred).size} classes predicted in the batch, {per_image:.1f} per image), {rounds} interleaved "
          f"rounds:\n  bare predict_proba {batch / med['proba']:6.1f} img/s | bare forward to logits "
          f"{batch / med['logits']:6.1f} img/s | forward + per-pixel MDSA of every pixel {batch / med['sa']:6.1f} "
          f"img/s (medians)\n  median ratio to predict_proba {ratio('proba')}\n  median ratio to the forward to "
          f"logits {ratio('logits')}   [{_load()}]")
    kt = [kernel_time() for _ in range(rounds)]
    print(f"  the fused map alone after a forward (numba prange, torch.mm whitening): median of {rounds} runs "
          f"{1e3 * np.median(kt):.2f} ms per batch (quartiles {1e3 * np.percentile(kt, 25):.2f}-"
          f"{1e3 * np.percentile(kt, 75):.2f})   [{_load()}]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller inputs (CI smoke run)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (the target machine has 2 cores)")
    ap.add_argument("--only", choices=["mdsa", "heatmap", "lsa", "forward"], help="run one group of figures")
    ap.add_argument("--workdir", default="runs/bench_surprise", help="checkpoints of the briefly trained models")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n_ref = 10_000
    m = 200_000 if args.quick else 1_000_000
    print(f"surprise benchmark: {n_ref} reference traces per class, torch threads {args.threads}, "
          f"CPU {cpu_model()}")
    run = lambda group: args.only in (None, group)  # noqa: E731
    if run("mdsa"):
        for d in (64, 256):
            bench_mdsa(d, n_ref, m if d == 64 else m // 4)
    if run("heatmap"):
        for d in (64, 256):
            bench_heatmap(d, n_ref, 128, 8 if args.quick else 32)
    if run("lsa"):
        for dtype in ("float64", "float32"):
            bench_lsa(64, n_ref, 100 if args.quick else 300, 1000 if args.quick else 3000, dtype)
    if run("forward"):
        workdir = Path(args.workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        for arch, epochs in (("deeplabv3_mnv3", 2), ("small_fcn", 4)):
            bench_forward(arch, 128, 8, 1 if args.quick else epochs, workdir)

if __name__ == "__main__":
    main()
