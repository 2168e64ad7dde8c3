"""Defuse benchmarks (timings are machine-dependent; nothing here asserts on them).

1. Identification throughput (decoded images/s) of `identify` as a ratio to the bare
   decode + classify loop of the same β-VAE decoder and classifier on the same codes, batch size
   and thread count (target >= 0.9). Runs alternate A/B and the median of `--repeats` is kept.
2. Distillation (DP-GMM, K = 100, full covariance) fit time and convergence at 10,000 and
   50,000 codes, with scikit-learn's plain GaussianMixture (EM, same K, same BLAS threads) on the
   same codes as the side-by-side peer (`--peer-sizes`). Codes: real identified codes from `--codes identified.npz` (e.g. from
   `examples/defuse.py --data mnist|fashion`) resampled with replacement, else a synthetic 10-D mixture.
   Identification perturbs only correctly classified, reconstructable sources (Algorithm 1); the
   throughput benchmark turns both source filters off so every random source is decoded Q times.
3. `--cost mnist,fashion`: Defuse on the cost axis — test and judged scenario accuracy of Defuse's
   votes vs labelling identified examples one by one vs relabelling random images, at equal numbers
   of human labels (`benchmarks/defuse_cost.py`; it replaces 1 and 2 in that run).

    .venv/bin/python benchmarks/defuse.py [--codes runs/defuse_mnist/identify/identified.npz]
"""
from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch

import defuse_cost

from blindspots.scenarios.clustering import Distiller
from blindspots.defuse.identify import Identified, IdentifySettings, draw_noise, identify
from blindspots.defuse.vae import BetaVAE, ConvVAENet, to_uint8
from blindspots.models.classifier_zoo import as_classifier, build_classifier


def mnist_sized_models(seed: int = 0) -> tuple[BetaVAE, torch.nn.Module]:
    """Paper-sized (MNIST) β-VAE and Figure 7 classifier; random weights (speed does not depend on them)."""
    torch.manual_seed(seed)
    vae = BetaVAE(latent_dim=10, width=32, progress=False)
    vae.net_ = ConvVAENet((28, 28, 1), 10, 32, 256).eval()
    return vae, build_classifier("defuse_cnn", 10, (28, 28, 1)).eval()


@torch.no_grad()
def bare(vae: BetaVAE, clf, z: np.ndarray, batch: int) -> float:
    """Seconds for decode -> uint8 -> classify -> argmax over all codes, nothing else, in chunks of
    the classifier's batch size (the fastest chunking we found; `batch` codes are handed over at once)."""
    t0 = time.perf_counter()
    for i in range(0, len(z), batch):
        zb = z[i:i + batch]
        for j in range(0, len(zb), clf.batch_size):
            imgs = to_uint8(vae.net_.decode(torch.from_numpy(zb[j:j + clf.batch_size])))
            clf.forward_tensor(imgs).argmax(1).numpy()
    return time.perf_counter() - t0


def bench_identify(n_sources: int, q: int, batch: int, repeats: int) -> None:
    vae, net = mnist_sized_models()
    clf = as_classifier(net, 10)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (n_sources, 28, 28, 1), dtype=np.uint8)
    labels = rng.integers(0, 10, n_sources)
    # Random weights: almost no source is "correct", so the source filters are off (throughput only).
    settings = IdentifySettings(q=q, max_per_source=100, shard_size=max(1, batch // q), batch_size=batch,
                                only_correct=False, recon_min_proba=0.0)
    mu, _ = vae.encode(images)
    z = (np.repeat(mu, q, axis=0) + draw_noise(rng, (n_sources * q, 10), 50, 50, "centred")).astype(np.float32)
    n = n_sources * q
    ident_t, bare_t = [], []
    for r in range(repeats):
        if r % 2:  # alternate which runs first, so warm-up and load drift do not favour one side
            bare_t.append(bare(vae, clf, z, batch))
        t0 = time.perf_counter()
        res = identify(vae, clf, images, labels, settings=settings, progress=False)
        ident_t.append(time.perf_counter() - t0)
        if not r % 2:
            bare_t.append(bare(vae, clf, z, batch))
    ti, tb = statistics.median(ident_t), statistics.median(bare_t)
    print(f"identification: {n} decodes (Q={q}, {n_sources} sources, batch {batch}, {torch.get_num_threads()} thread(s))")
    print(f"  identify          {n / ti:9.0f} images/s  (median of {repeats}; kept {len(res)})")
    print(f"  bare decode+clf   {n / tb:9.0f} images/s")
    print(f"  ratio identify / bare = {tb / ti:.3f}  (target >= 0.9)")


def bench_distill(sizes: list[int], codes_path: str | None, max_iter: int, peer_sizes: set[int]) -> None:
    from sklearn.mixture import GaussianMixture
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    if codes_path:
        base = Identified.load(codes_path).codes.astype(np.float64)
        source = f"resampled from {len(base)} identified codes ({codes_path})"
    else:
        centres = rng.normal(0, 2, (30, 10))
        base = np.concatenate([c + rng.normal(0, 0.3, (2000, 10)) @ rng.normal(0, 0.5, (10, 10)) for c in centres])
        source = "synthetic 10-D mixture of 30 Gaussians"
    print(f"\ndistillation (K=100, full covariance, max_iter={max_iter}); codes: {source}")
    for n in sizes:
        codes = base[rng.choice(len(base), n, replace=len(base) < n)]
        if len(base) < n:  # resampling with replacement duplicates codes; jitter keeps covariances proper
            codes = codes + rng.normal(0, 1e-3, codes.shape)
        d = Distiller(max_codes=n, max_iter=max_iter, random_state=0).fit(codes)
        fit = d.scenarios_.fit
        line = (f"  n={n:6d}: DP-GMM {fit['seconds']:7.1f} s, converged={fit['converged']}, n_iter={fit['n_iter']}, "
                f"kept {fit['n_kept']} (weight > 0.01)")
        if n in peer_sizes:
            with warnings.catch_warnings(), threadpool_limits(1):
                warnings.simplefilter("ignore")
                t0 = time.perf_counter()
                gm = GaussianMixture(100, covariance_type="full", max_iter=max_iter, random_state=0).fit(codes)
                tg = time.perf_counter() - t0
            line += (f" | plain GMM {tg:7.1f} s, converged={gm.converged_}, n_iter={gm.n_iter_}"
                     f" | time ratio DP/plain = {fit['seconds'] / tg:.2f}")
        print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sources", type=int, default=200)
    ap.add_argument("--q", type=int, default=50)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sizes", default="10000,50000")
    ap.add_argument("--codes", default=None)
    ap.add_argument("--peer-sizes", default="10000,50000", help="sizes at which the plain-GMM peer also runs")
    ap.add_argument("--max-iter", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-identify", action="store_true")
    ap.add_argument("--skip-distill", action="store_true")
    defuse_cost.add_arguments(ap)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.cost:
        defuse_cost.run(args.cost.split(","), args.cost_out, args)
        return
    if not args.skip_identify:
        bench_identify(args.sources, args.q, args.batch, args.repeats)
    if not args.skip_distill:
        bench_distill([int(s) for s in args.sizes.split(",")], args.codes, args.max_iter,
                      {int(s) for s in args.peer_sizes.split(",") if s})


if __name__ == "__main__":
    main()
