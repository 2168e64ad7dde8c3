"""The demo zoo: a narrow target and competitors of other designs trained on procedural scenes
(`blindspots zoo train`, the demo's models), with validation metrics in `zoo.json`."""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from blindspots.atomic import write_atomic
from blindspots.data.scenes import POOL_HARD_FRACTION, SCENE_CLASSES, render_scene_arrays
from blindspots.models.checkpoints import FORMAT_KEY, save_checkpoint_dict
from blindspots.models.zoo import ZOO, build_model, read_checkpoint
from blindspots.training.loop import torch_seeded
from blindspots.training.segmentation import evaluate_segmentation, fit_segmenter, predict_labels

logger = logging.getLogger(__name__)

# A full-resolution U-Net target learns the small classes (people, poles) at 64 px within minutes, so
# it is good in-distribution; competitors are other designs (pyramid pooling, LR-ASPP, a plain FCN).
DEFAULT_TARGET = "tiny_unet"
DEFAULT_COMPETITORS = ("pspnet_r18", "lraspp_mnv3", "small_fcn")


def train_zoo(
    out_dir: str | Path,
    *,
    target: str = DEFAULT_TARGET,
    competitors: Sequence[str] = DEFAULT_COMPETITORS,
    n_train: int = 600,
    n_val: int = 150,
    size: int = 64,
    epochs: int = 8,
    competitor_epochs: int | None = None,
    batch_size: int = 16,
    lr: float = 2e-3,
    seed: int = 0,
    resume: bool = True,
    progress: bool = True,
    n_jobs: int = 1,
) -> dict[str, Any]:
    """Train a target and competitors of different design on procedural scenes; write `zoo.json`.

    The target sees only the narrow "train" slice of scene conditions; competitors see "broad"
    conditions (with brightness/contrast jitter), so they are better on shifted ("hard") scenes —
    the setting in which MAD's disagreements point at the target's failures. All use AdamW + poly
    and square-root median-frequency class weights, without which people and poles (about 1% of
    pixels each) are not learned within a few CPU epochs at 64 px.
    Writes `out_dir/<name>.pt` (name = architecture) and `out_dir/zoo.json` with each model's
    mIoU on an in-distribution and a hard validation set, the share of scenes whose per-image mIoU
    is below 0.5 in each, and the share expected in a "pool" (5% hard). Resumable: finished
    epochs are kept in the checkpoints. n_jobs: processes rendering the scenes (-1: all cores).
    """
    names = [target, *competitors]
    for name in names:
        if name not in ZOO:
            raise ValueError(f"target/competitors: expected names from {sorted(ZOO)}, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"competitors: expected architectures different from each other and from the target, "
                         f"got {names}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plan = {"train": (n_train, "train", seed), "broad": (n_train, "broad", seed + 1),
            "val_in": (n_val, "train", seed + 2), "val_hard": (n_val, "hard", seed + 3)}
    data = {key: render_scene_arrays(n, seed=s, distribution=dist, size=size, progress=progress, n_jobs=n_jobs)
            for key, (n, dist, s) in plan.items()}
    summary: dict[str, Any] = {"target": target, "competitors": list(competitors), "size": size, "seed": seed,
                               "n_train": n_train, "n_val": n_val, "classes": SCENE_CLASSES.to_dict(),
                               "models": {}}
    for i, name in enumerate(names):
        role = "target" if i == 0 else "competitor"
        dist = "train" if role == "target" else "broad"
        imgs, msks, _ = data[dist]
        ep = epochs if role == "target" or competitor_epochs is None else competitor_epochs
        with torch_seeded(seed * 1000 + i):  # weight init
            model = build_model(name, SCENE_CLASSES.num_classes)
        t0 = time.perf_counter()
        meta = {"role": role, "data": {"generator": "blindspots.data.scenes", "distribution": dist,
                                       "n": n_train, "size": size, "seed": seed if dist == "train" else seed + 1}}
        res = fit_segmenter(model, (imgs, msks), epochs=ep, batch_size=batch_size, lr=lr, seed=seed,
                              checkpoint_path=out / f"{name}.pt", resume=resume, arch=name, classes=SCENE_CLASSES,
                              meta=meta, color_jitter=0.0 if role == "target" else 0.3, progress=progress,
                              class_weights="balanced")
        metrics = {}
        for key in ("val_in", "val_hard"):
            e = evaluate_segmentation(predict_labels(model, data[key][0]), data[key][1], SCENE_CLASSES.num_classes)
            metrics[key] = {"miou": e["miou"], "pixel_acc": e["pixel_acc"],
                            "mean_image_miou": float(np.nanmean(e["per_image_miou"])),
                            "frac_image_miou_below_0.5": e["frac_below_0.5"]}
        # a "pool" scene is hard with probability POOL_HARD_FRACTION: the expected failure share there
        metrics["pool_estimate"] = {"frac_image_miou_below_0.5": (1 - POOL_HARD_FRACTION) * metrics["val_in"][
            "frac_image_miou_below_0.5"] + POOL_HARD_FRACTION * metrics["val_hard"]["frac_image_miou_below_0.5"]}
        summary["models"][name] = {"role": role, "arch": name, "checkpoint": f"{name}.pt", "epochs": ep,
                                   "train_distribution": dist, "train_seconds": time.perf_counter() - t0,
                                   "final_loss": res.history[-1]["loss"] if res.history else None,
                                   "metrics": metrics}
        _save_metrics(out / f"{name}.pt", metrics)
        logger.info("%s (%s): in %.3f hard %.3f", name, role, metrics["val_in"]["miou"], metrics["val_hard"]["miou"])
    write_atomic(out / "zoo.json", lambda t: t.write_text(json.dumps(summary, indent=2)))
    return summary


def _save_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """Add validation metrics to a checkpoint's meta (kept atomic)."""
    ckpt = read_checkpoint(path)
    ckpt.setdefault("meta", {})["metrics"] = metrics
    save_checkpoint_dict(path, {k: v for k, v in ckpt.items() if k != FORMAT_KEY}, format=ckpt[FORMAT_KEY])
