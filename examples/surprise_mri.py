"""Surprise adequacy on a real labelled set: brain MRI slices with coarse AAL region classes.

Data: the Colin27 T1 template and AAL atlas of Debian's ``mricron-data`` (``blindspots.data.mri``):
~140 axial slices, 8 classes (background, other brain, frontal, deep grey matter, occipital, parietal,
temporal, cerebellum). A zoo ``small_fcn`` is trained on every other slice; the test set is the other
slices, once as they are and once with an acquisition-like shift (intensity gamma, contrast and
Gaussian noise, seeded), so some test images are clearly outside the training distribution.
Prints Table 3 (Spearman SA vs IoU per class, LSA and MDSA), how LSA and MDSA rank images, and draws
Figure 9 and Figure 6 panels. For CPU time the defaults score 300 pixels per predicted class (paper
1,000) and give LSA 1,000 reference traces per class (paper 10,000; MDSA keeps them all).

    apt-get install -y mricron-data   # once
    .venv/bin/python examples/surprise_mri.py --out runs/surprise_mri
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import matplotlib
import numpy as np
import torch
from scipy.stats import spearmanr

matplotlib.use("Agg")

from blindspots.data.mri import load_mri_slices  # noqa: E402
from blindspots.models.adapters import TorchSegmenter  # noqa: E402
from blindspots.training.segmentation import fit_segmenter  # noqa: E402
from blindspots.models.zoo import build_model, load_checkpoint  # noqa: E402
from blindspots.surprise import LSA, MDSA, TraceExtractor, collect_fit_traces, surprise_heatmaps  # noqa: E402
from blindspots.surprise.sampler import cap_per_class  # noqa: E402
from blindspots.surprise.analysis import (label_saving_tradeoff, plot_label_saving, sa_and_iou,  # noqa: E402
                                          spearman_table)
from blindspots.surprise.views import panels_for, save_png  # noqa: E402


def shifted(images: np.ndarray, seed: int) -> np.ndarray:
    """Acquisition-like shift per image: gamma 0.5-2, contrast 0.6-1.4, Gaussian noise sd 5-25 (uint8)."""
    rng = np.random.default_rng(seed)
    out = np.empty_like(images)
    for i, im in enumerate(images.astype(np.float32) / 255.0):
        g, c, sd = rng.uniform(0.5, 2.0), rng.uniform(0.6, 1.4), rng.uniform(5, 25)
        x = np.clip((im ** g - 0.5) * c + 0.5, 0, 1) * 255 + rng.normal(0, sd, im.shape[:2])[..., None]
        out[i] = np.clip(x, 0, 255).astype(np.uint8)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/surprise_mri"), help="output folder")
    ap.add_argument("--arch", default="small_fcn", help="zoo architecture")
    ap.add_argument("--size", type=int, default=64, help="slice side in pixels")
    ap.add_argument("--epochs", type=int, default=40, help="training epochs")
    ap.add_argument("--score-pixels", type=int, default=300, help="pixels scored per predicted class (paper: 1,000)")
    ap.add_argument("--lsa-cap", type=int, default=1000, help="LSA reference traces per class (paper: 10,000)")
    ap.add_argument("--seed", type=int, default=0, help="random seed")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)

    images, masks, classes = load_mri_slices(size=args.size)
    c = classes.num_classes
    tr, te = np.arange(0, len(images), 2), np.arange(1, len(images), 2)
    ckpt = out / f"{args.arch}.pt"
    torch.manual_seed(args.seed)
    model = build_model(args.arch, c)
    fit_segmenter(model, (images[tr], masks[tr]), epochs=args.epochs, batch_size=8, seed=args.seed,
                  checkpoint_path=ckpt, arch=args.arch, classes=classes, progress=False)
    model, _ = load_checkpoint(ckpt)
    ex = TraceExtractor(TorchSegmenter(model, c, batch_size=32))

    x, y = collect_fit_traces(ex, list(zip(images[tr], masks[tr])), seed=args.seed, progress=False)
    mdsa = MDSA().fit(x, y)
    keep = cap_per_class(y, args.lsa_cap, np.random.default_rng(args.seed))  # random subset per class
    lsa = LSA().fit(x[keep], y[keep])
    print(f"MRI: {len(images)} slices ({len(tr)} train), {c} classes, layer {ex.layer}, d = {x.shape[1]} "
          f"({lsa.kept_features_.size} kept after the variance filter), traces per class "
          f"{np.bincount(y).tolist()}")

    test_imgs = np.concatenate([images[te], shifted(images[te], args.seed)])
    test_masks = np.concatenate([masks[te], masks[te]])
    is_shifted = np.repeat([False, True], len(te))
    sa, iou, in_label, pred = sa_and_iou(ex, {"LSA": lsa, "MDSA": mdsa}, list(zip(test_imgs, test_masks)),
                                         per_class=args.score_pixels, seed=args.seed)
    table = spearman_table(sa, iou, list(classes.names), in_label)
    print("\nTable 3 - Spearman rank correlation between class SA and class IoU (test slices, clean + shifted)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    table.to_csv(out / "table3.csv", index=False)

    print("\nSpearman between class LSA and class MDSA over images:")
    rhos = {}
    for k, name in enumerate(classes.names):
        ok = np.isfinite(sa["LSA"][:, k]) & np.isfinite(sa["MDSA"][:, k])
        if ok.sum() >= 3:
            rhos[name] = float(spearmanr(sa["LSA"][ok, k], sa["MDSA"][ok, k]).statistic)
            print(f"  {name:11s} n={int(ok.sum()):4d} rho={rhos[name]:.3f}")
    miou = np.nanmean(iou, axis=1)
    print(f"\nmean image mIoU: clean {np.nanmean(miou[~is_shifted]):.3f}, shifted {np.nanmean(miou[is_shifted]):.3f}")

    curves = {}
    for k, name in enumerate(classes.names):
        use = in_label[:, k] & np.isfinite(sa["MDSA"][:, k])  # in the label and predicted somewhere
        if use.sum() >= 10:
            curves[name] = label_saving_tradeoff(sa["MDSA"][use, k], iou[use, k])
    plot_label_saving(curves, title="MRI slices: MDSA label-saving trade-off").savefig(out / "figure9.png", dpi=110)
    print("\nFigure 9 at 50% savings (share of skipped images with IoU < 0.5 / mean 1 - IoU):")
    for name, df in curves.items():
        r = df.loc[np.isclose(df["saving"], 0.5)].iloc[0]
        print(f"  {name:11s} {r['inacc@0.5']:.3f} / {r['iou_inacc']:.3f}")

    pick = np.array([0, len(te) // 2, len(te), len(te) + len(te) // 2])
    maps, preds = surprise_heatmaps(ex, mdsa, test_imgs[pick])
    for i, frame in zip(pick, panels_for(test_imgs[pick], preds, maps, classes, labels=test_masks[pick])):
        save_png(frame, out / f"figure6_{i}{'_shifted' if is_shifted[i] else ''}.png")
    (out / "summary.json").write_text(json.dumps({"table3": table.to_dict(orient="records"),
                                                  "class_lsa_mdsa_rho": rhos}, indent=1, default=float))
    print(f"\nwrote {out}/table3.csv, figure9.png, figure6_*.png, summary.json")
    print(f"next: blindspots report {out}     # these results as an offline HTML page")


if __name__ == "__main__":
    main()
