"""Surprise adequacy on procedural street scenes (Kim et al. 2023, RQ1-RQ2, and the views).

A target (zoo ``small_fcn``: features at 1/4 resolution, d = 64, upsampled bilinearly like its logits)
is trained on the narrow day-time slice of the scene generator, then scored on a pool that mixes
in-distribution scenes with shifted ones (night / dusk, object scale, colour shift, occlusion, ...).
Prints Table 3 (Spearman SA vs per-image class IoU, LSA and MDSA), how LSA and MDSA rank images,
how surprise separates shifted from in-distribution scenes, and draws Figure 9, Figure 6 panels and
an MP4. Everything is resumable (training checkpoint); run it again to reuse the trained model.

    .venv/bin/python examples/surprise_scenes.py --out runs/surprise_scenes

Settings differing from the paper for CPU time (flags): LSA keeps 2,000 traces per class (paper
10,000; MDSA keeps 10,000) and 300 pixels per predicted class are scored per image (paper 1,000).
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
from sklearn.metrics import roc_auc_score

matplotlib.use("Agg")

from blindspots.data.scenes import SCENE_CLASSES, render_scene_arrays  # noqa: E402
from blindspots.models.adapters import TorchSegmenter  # noqa: E402
from blindspots.training.segmentation import fit_segmenter  # noqa: E402
from blindspots.models.zoo import build_model, load_checkpoint  # noqa: E402
from blindspots.surprise import LSA, MDSA, TraceExtractor, collect_fit_traces, surprise_heatmaps  # noqa: E402
from blindspots.surprise.sampler import cap_per_class  # noqa: E402
from blindspots.surprise.analysis import (label_saving_tradeoff, plot_label_saving, sa_and_iou,  # noqa: E402
                                          spearman_table)
from blindspots.surprise.image import class_surprise  # noqa: E402
from blindspots.surprise.views import panels_for, save_png, write_video  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("runs/surprise_scenes"), help="output folder")
    ap.add_argument("--arch", default="small_fcn", help="zoo architecture of the target")
    ap.add_argument("--size", type=int, default=64, help="scene side in pixels")
    ap.add_argument("--n-train", type=int, default=400, help="day-time training scenes")
    ap.add_argument("--n-pool", type=int, default=300, help="pool scenes (half in-distribution, half shifted)")
    ap.add_argument("--epochs", type=int, default=8, help="training epochs of the target")
    ap.add_argument("--lsa-cap", type=int, default=2000, help="LSA reference traces per class (paper: 10,000)")
    ap.add_argument("--score-pixels", type=int, default=300, help="pixels scored per predicted class (paper: 1,000)")
    ap.add_argument("--seed", type=int, default=0, help="random seed")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--retrain", action="store_true", help="also run RQ3 (Tables 4-5): fine-tune on base + "
                    "high / low / random vehicle-SA subsets through the replay fine-tuner (slow)")
    ap.add_argument("--retrain-base", type=int, default=100, help="base training images for RQ3")
    ap.add_argument("--retrain-epochs", type=int, default=2, help="fine-tuning epochs per RQ3 run")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    torch.set_num_threads(args.threads)
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    c = SCENE_CLASSES.num_classes

    # 1. target trained on day scenes only (the generator's "train" slice)
    train_imgs, train_masks, _ = render_scene_arrays(args.n_train, seed=args.seed, distribution="train",
                                                     size=args.size)
    ckpt = out / f"{args.arch}.pt"
    torch.manual_seed(args.seed)
    model = build_model(args.arch, c)
    fit_segmenter(model, (train_imgs, train_masks), epochs=args.epochs, seed=args.seed, checkpoint_path=ckpt,
                  arch=args.arch, classes=SCENE_CLASSES, progress=False)
    model, _ = load_checkpoint(ckpt)
    seg = TorchSegmenter(model, c, batch_size=32)
    ex = TraceExtractor(seg)

    # 2. SA models from training traces (paper: 100 px per label class per image, 10,000 per class)
    x, y = collect_fit_traces(ex, list(zip(train_imgs, train_masks)), seed=args.seed, progress=False)
    mdsa = MDSA().fit(x, y)
    keep = cap_per_class(y, args.lsa_cap, np.random.default_rng(args.seed))  # random subset per class
    lsa = LSA().fit(x[keep], y[keep])
    print(f"target {args.arch}: layer {ex.layer}, d = {x.shape[1]} ({mdsa.kept_features_.size} kept), "
          f"{len(y)} MDSA / {keep.size} LSA traces; regularised classes: MDSA {sorted(mdsa.regularised_)}, "
          f"LSA {sorted(lsa.regularised_)}")

    # 3. pool: in-distribution + shifted scenes
    half = args.n_pool // 2
    in_imgs, in_masks, in_cond = render_scene_arrays(half, seed=args.seed + 10, distribution="train", size=args.size)
    hd_imgs, hd_masks, hd_cond = render_scene_arrays(args.n_pool - half, seed=args.seed + 11, distribution="hard",
                                                     size=args.size)
    imgs, masks = np.concatenate([in_imgs, hd_imgs]), np.concatenate([in_masks, hd_masks])
    hard = np.array([cd.is_hard for cd in in_cond + hd_cond])
    data = list(zip(imgs, masks))

    # 4. Table 3: per-class SA vs per-image class IoU
    sa, iou, in_label, pred = sa_and_iou(ex, {"LSA": lsa, "MDSA": mdsa}, data, per_class=args.score_pixels,
                                         seed=args.seed)
    table = spearman_table(sa, iou, list(SCENE_CLASSES.names), in_label)
    print("\nTable 3 - Spearman rank correlation between class SA and class IoU (pool images)")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3g}"))
    table.to_csv(out / "table3.csv", index=False)

    # 5. MDSA ranks images like LSA? (per class, images where both exist; and image-level SA)
    rows = []
    for k, name in enumerate(SCENE_CLASSES.names):
        ok = np.isfinite(sa["LSA"][:, k]) & np.isfinite(sa["MDSA"][:, k])
        if ok.sum() >= 3:
            rows.append((name, int(ok.sum()), spearmanr(sa["LSA"][ok, k], sa["MDSA"][ok, k]).statistic))
    print("\nSpearman between class LSA and class MDSA over images:")
    for name, n, rho in rows:
        print(f"  {name:11s} n={n:4d} rho={rho:.3f}")
    res_l = class_surprise(ex, lsa, imgs, per_class=args.score_pixels, seed=args.seed)
    res_m = class_surprise(ex, mdsa, imgs, per_class=args.score_pixels, seed=args.seed)
    img_l, img_m = res_l.image_sa(lsa), res_m.image_sa(mdsa)
    rho_img = spearmanr(img_l, img_m, nan_policy="omit").statistic
    print(f"  image-level SA (mean z-scored class SA): rho={rho_img:.3f}")

    # 6. does surprise point at the shifted scenes, and at low-IoU images?
    miou = np.nanmean(iou, axis=1)
    ok = np.isfinite(img_m) & np.isfinite(img_l)  # NaN only if an image shows no modelled class
    auc_m, auc_l = roc_auc_score(hard[ok], img_m[ok]), roc_auc_score(hard[ok], img_l[ok])
    print(f"\nshifted vs in-distribution scenes: AUROC image MDSA {auc_m:.3f}, LSA {auc_l:.3f}; "
          f"mean image mIoU in-dist {np.nanmean(miou[~hard]):.3f}, shifted {np.nanmean(miou[hard]):.3f}")
    print(f"Spearman image MDSA vs image mIoU: {spearmanr(img_m, miou, nan_policy='omit').statistic:.3f}")

    # 7. Figure 9 (MDSA, the paper's choice)
    curves = {}
    for k, name in enumerate(SCENE_CLASSES.names):
        use = in_label[:, k] & np.isfinite(sa["MDSA"][:, k])  # in the label and predicted somewhere
        if use.sum() >= 10:
            curves[name] = label_saving_tradeoff(sa["MDSA"][use, k], iou[use, k])
    plot_label_saving(curves, title="Scenes: MDSA label-saving trade-off").savefig(out / "figure9.png", dpi=110)
    print("\nFigure 9 at 50% savings (share of skipped images with IoU < 0.5 / mean 1 - IoU):")
    for name, df in curves.items():
        r = df.loc[np.isclose(df["saving"], 0.5)].iloc[0]
        print(f"  {name:11s} {r['inacc@0.5']:.3f} / {r['iou_inacc']:.3f}")

    # 8. Figure 6 panels of the most surprising images and a video of the pool's first 40 frames
    order = np.argsort(-img_m)[:4]
    sa_maps, preds = surprise_heatmaps(ex, mdsa, imgs[:40])
    frames = list(panels_for(imgs[:40], preds, sa_maps, SCENE_CLASSES, labels=masks[:40]))
    write_video(frames, out / "surprise.mp4", fps=4)
    top_maps, top_preds = surprise_heatmaps(ex, mdsa, imgs[order])
    for rank, (i, frame) in enumerate(zip(order, panels_for(imgs[order], top_preds, top_maps, SCENE_CLASSES,
                                                            labels=masks[order]))):
        save_png(frame, out / f"figure6_top{rank}_{i}.png")
    if args.retrain:
        summary_rq3 = retrain(args, model, mdsa, ex, train_imgs, train_masks, data)
        print("\nTables 4-5 (RQ3) - vehicle IoU on the pool after fine-tuning on base + subset:")
        print(summary_rq3.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        summary_rq3.to_csv(out / "tables4_5.csv", index=False)
    summary = {"rho_image_lsa_mdsa": rho_img, "auroc_hard_mdsa": auc_m, "auroc_hard_lsa": auc_l,
               "class_lsa_mdsa_rho": {n: r for n, _, r in rows}, "table3": table.to_dict(orient="records")}
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    print(f"\nwrote {out}/table3.csv, figure9.png, surprise.mp4, figure6_top*.png, summary.json")
    print(f"next: blindspots report {out}     # these results as an offline HTML page")


def retrain(args, model, mdsa, ex, train_imgs, train_masks, test):
    """RQ3 at CPU scale: candidates are broad-condition scenes with >= 50 vehicle pixels, scored by their
    vehicle class MDSA; subsets of 10/20/30% of the base are added and fine-tuned with the replay routine."""
    from blindspots.data.scenes import VEHICLE
    from blindspots.training.replay import ReplayFinetuner
    from blindspots.surprise.analysis import run_retraining

    cand_imgs, cand_masks, _ = render_scene_arrays(4 * args.retrain_base, seed=args.seed + 20, distribution="broad",
                                                   size=args.size)
    has = (cand_masks == VEHICLE).sum(axis=(1, 2)) >= 50
    cand_imgs, cand_masks = cand_imgs[has], cand_masks[has]
    cand_sa = class_surprise(ex, mdsa, cand_imgs, per_class=args.score_pixels, seed=args.seed).class_sa[:, VEHICLE]
    base = list(zip(train_imgs[:args.retrain_base], train_masks[:args.retrain_base]))
    val_imgs, val_masks, _ = render_scene_arrays(40, seed=args.seed + 21, distribution="train", size=args.size)
    make = lambda: ReplayFinetuner(lrs=[1e-2], epochs=args.retrain_epochs, batch_size=8, seed=args.seed,  # noqa: E731
                                   progress=False)
    return run_retraining(model, base, list(zip(cand_imgs, cand_masks)), cand_sa, list(zip(val_imgs, val_masks)),
                          test, num_classes=SCENE_CLASSES.num_classes, class_id=VEHICLE, finetuner=make,
                          work_dir=args.out / "rq3", seed=args.seed)


if __name__ == "__main__":
    main()
