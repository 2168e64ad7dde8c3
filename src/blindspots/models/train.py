"""Training segmentation models on CPU: a reusable epoch loop, checkpoints every epoch, resume.

`train_segmenter` trains a module (e.g. from `models.zoo.build_model`) on a labelled set with
AdamW and a poly learning-rate decay (power 0.9, the DeepLab schedule the MAD paper's models use);
AdamW because it converges in a few epochs from random initialisation on CPU where plain SGD needs
many more. Cross-entropy ignores `ignore_index` (255). Horizontal flips are the only default
augmentation: the target model must stay narrow (no brightness/colour jitter unless asked), so
that it fails on the conditions it never saw.

Determinism: the epoch's shuffle, flips and torch's own randomness (dropout) come from
(seed, epoch), inside `torch.random.fork_rng` so the global torch RNG is left untouched; an
interrupted run resumed from its checkpoint gives the same weights as an uninterrupted one.

`train_epoch` is the reusable loop (the fine-tuning routine brings its own optimizer/schedule).
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from blindspots.data.classes import Classes
from blindspots.metrics import ConfusionMatrix, per_image_miou
from blindspots.models.adapters import TorchPreprocess
from blindspots.models.checkpoints import FORMAT_KEY, save_checkpoint_dict

logger = logging.getLogger(__name__)

IGNORE_INDEX = 255


def as_arrays(data: Any, name: str = "train_set") -> tuple[np.ndarray, np.ndarray]:
    """A labelled set as (images uint8 [N, H, W, 3], masks uint8/int [N, H, W]).

    data: a tuple (images, masks) of arrays, or any sized indexable of (image, mask) pairs
    (e.g. `SegmentationSet`) whose items share one size.
    """
    if isinstance(data, tuple) and len(data) == 2 and all(isinstance(a, np.ndarray) for a in data):
        images, masks = data
    else:
        try:
            n = len(data)
        except TypeError:
            raise ValueError(f"{name}: expected (images, masks) arrays or a sequence of (image, mask) pairs, "
                             f"got {type(data).__name__}") from None
        if n == 0:
            raise ValueError(f"{name}: expected at least one example, got an empty set")
        pairs = [data[i] for i in range(n)]
        shapes = {p[0].shape for p in pairs}
        if len(shapes) != 1:
            raise ValueError(f"{name}: expected images of one size, got shapes {sorted(shapes)[:4]}")
        images = np.stack([p[0] for p in pairs])
        masks = np.stack([p[1] for p in pairs])
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        raise ValueError(f"{name}: expected images uint8 [N, H, W, 3], got {images.dtype} {images.shape}")
    if masks.shape != images.shape[:3]:
        raise ValueError(f"{name}: expected masks of shape {images.shape[:3]}, got {masks.shape}")
    if not np.issubdtype(masks.dtype, np.integer):
        raise ValueError(f"{name}: expected integer masks, got dtype {masks.dtype}")
    if len(images) == 0:
        raise ValueError(f"{name}: expected at least one example, got N=0")
    return images, masks


def _batches(n: int, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    order = rng.permutation(n)
    out = [order[i:i + batch_size] for i in range(0, n, batch_size)]
    if len(out) > 1 and len(out[-1]) < 2:  # BatchNorm needs >= 2 samples in train mode
        out[-2] = np.concatenate([out[-2], out.pop()])
    return out


def train_epoch(
    model: nn.Module,
    images: np.ndarray,
    masks: np.ndarray,
    optimizer: torch.optim.Optimizer,
    *,
    batch_size: int,
    rng: np.random.Generator,
    scheduler: Any | None = None,
    augment: bool = True,
    color_jitter: float = 0.0,
    ignore_index: int = IGNORE_INDEX,
    preprocess: Callable[..., torch.Tensor] | None = None,
    device: str | torch.device = "cpu",
    progress: bool = False,
    desc: str = "epoch",
    class_weights: torch.Tensor | None = None,
) -> float:
    """One pass over (images uint8 [N, H, W, 3], masks int [N, H, W]); returns the mean loss.

    scheduler: stepped after every optimizer step (e.g. a poly LambdaLR). augment: random
    horizontal flips. color_jitter: per-image brightness/contrast jitter amplitude (0 = off).
    Batches, flips and jitter come from `rng`. class_weights: float [C] cross-entropy weights.
    """
    if len(images) < 2:
        raise ValueError(f"images: expected at least 2 examples (BatchNorm), got {len(images)}")
    preprocess = preprocess or TorchPreprocess()
    model.train()
    total, count = 0.0, 0
    batches = _batches(len(images), batch_size, rng)
    bar = tqdm(batches, desc=desc, disable=not progress, leave=False)
    for idx in bar:
        x_np, y_np = images[idx], masks[idx].astype(np.int64)
        if augment:
            flip = rng.random(len(idx)) < 0.5
            x_np = np.where(flip[:, None, None, None], x_np[:, :, ::-1], x_np)
            y_np = np.where(flip[:, None, None], y_np[:, :, ::-1], y_np)
        x = preprocess(np.ascontiguousarray(x_np), device)
        if color_jitter > 0:
            a = torch.from_numpy(rng.uniform(1 - color_jitter, 1 + color_jitter, (len(idx), 1, 1, 1))).float()
            b = torch.from_numpy(rng.uniform(-color_jitter, color_jitter, (len(idx), 1, 1, 1))).float()
            x = x * a.to(x.device) + b.to(x.device)
        y = torch.from_numpy(np.ascontiguousarray(y_np)).to(device)
        logits = model(x)
        if isinstance(logits, dict):
            logits = logits["out"]
        weight = None if class_weights is None else class_weights.to(logits.device)
        loss = F.cross_entropy(logits, y, weight=weight, ignore_index=ignore_index)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if scheduler is not None:
            scheduler.step()
        total += loss.item() * len(idx)
        count += len(idx)
        bar.set_postfix(loss=f"{total / count:.3f}")
    return total / max(count, 1)


def balanced_class_weights(masks: np.ndarray, num_classes: int, ignore_index: int = IGNORE_INDEX) -> np.ndarray:
    """Square-root median-frequency weights, float32 [C]: sqrt(median(freq) / freq_k).

    A softened form of SegNet's median-frequency balancing, so rare thin classes (people, poles)
    are learned within a few CPU epochs without flooding the maps with them. Absent classes get 1.
    """
    m = masks[masks != ignore_index] if ignore_index is not None else masks.ravel()
    counts = np.bincount(m.ravel().astype(np.int64), minlength=num_classes)[:num_classes].astype(np.float64)
    freq = counts / max(counts.sum(), 1.0)
    present = freq > 0
    w = np.ones(num_classes)
    if present.any():
        w[present] = np.sqrt(np.median(freq[present]) / freq[present])
    return w.astype(np.float32)


def poly_lambda(total_steps: int, power: float = 0.9) -> Callable[[int], float]:
    """Poly decay factor (1 - step/total)^power, for torch.optim.lr_scheduler.LambdaLR."""
    total = max(int(total_steps), 1)
    return lambda step: max(1.0 - step / total, 0.0) ** power


@torch.no_grad()
def predict_labels(model: nn.Module, images: np.ndarray, *, batch_size: int = 32,
                   preprocess: Callable[..., torch.Tensor] | None = None,
                   device: str | torch.device = "cpu") -> np.ndarray:
    """Argmax label maps uint8 [N, H, W] of a module on images uint8 [N, H, W, 3] (eval mode)."""
    preprocess = preprocess or TorchPreprocess()
    was_training = model.training
    model.eval()
    out = []
    for i in range(0, len(images), batch_size):
        logits = model(preprocess(images[i:i + batch_size], device))
        if isinstance(logits, dict):
            logits = logits["out"]
        out.append(logits.argmax(1).to(torch.uint8).cpu().numpy())
    model.train(was_training)
    return np.concatenate(out)


def evaluate_segmentation(pred: np.ndarray, masks: np.ndarray, num_classes: int,
                          ignore_index: int = IGNORE_INDEX) -> dict[str, Any]:
    """Dataset mIoU, pixel accuracy and per-image mIoU (over classes present in either map).

    pred, masks: int [N, H, W]. Returns {"miou": float, "pixel_acc": float,
    "per_image_miou": float64 [N], "frac_below_0.5": float}.
    """
    cm = ConfusionMatrix(num_classes, ignore_index=ignore_index).update(pred, masks)
    per = per_image_miou(pred, masks, num_classes, ignore_index)
    return {"miou": float(cm.mean_iou()), "pixel_acc": float(cm.pixel_accuracy()),
            "per_image_miou": per, "frac_below_0.5": float(np.mean(per < 0.5))}


@dataclass
class TrainResult:
    """What `train_segmenter` returns: the trained model and one dict per epoch
    (epoch, loss, lr, seconds and, with a validation set, val_miou)."""

    model: nn.Module
    history: list[dict[str, float]] = field(default_factory=list)
    resumed_from: int = 0


def train_segmenter(model: nn.Module, train_set: Any, **kwargs: Any) -> nn.Module:
    """Train `model` in place (see `fit_segmenter` for every setting) and return it in eval mode.

    Example: `model = train_segmenter(build_model("tiny_unet", 8), (images, masks), epochs=6, seed=0)`.
    """
    return fit_segmenter(model, train_set, **kwargs).model


def fit_segmenter(
    model: nn.Module,
    train_set: Any,
    *,
    epochs: int = 10,
    batch_size: int = 16,
    lr: float = 2e-3,
    weight_decay: float = 1e-4,
    seed: int = 0,
    checkpoint_path: str | Path | None = None,
    resume: bool = True,
    arch: str | None = None,
    classes: Classes | None = None,
    meta: dict[str, Any] | None = None,
    augment: bool = True,
    color_jitter: float = 0.0,
    val_set: Any | None = None,
    ignore_index: int = IGNORE_INDEX,
    device: str = "cpu",
    progress: bool = True,
    on_epoch_end: Callable[[dict[str, float]], None] | None = None,
    class_weights: str | Sequence[float] | np.ndarray | None = None,
) -> TrainResult:
    """Train `model` in place with AdamW + poly decay and cross-entropy; checkpoint every epoch.

    train_set / val_set: (images uint8 [N, H, W, 3], masks int [N, H, W]) or a SegmentationSet-like
        sequence of (image, mask) pairs.
    checkpoint_path: written atomically after every epoch; holds optimizer/scheduler state for
        resume. With `arch` and `classes` it is a full zoo checkpoint (`load_segmenter` reads it);
        without, a training-state file. With resume=True an existing checkpoint is loaded and
        training continues after its last epoch (settings must match; `epochs` may grow).
    on_epoch_end: called with each epoch's record after its checkpoint is written.
    class_weights: None (plain cross-entropy), "balanced" (`balanced_class_weights` of the
        training masks) or float [C].
    Returns a TrainResult (model, per-epoch history, epoch resumed from).
    Defaults (AdamW lr 2e-3, weight decay 1e-4, batch 16, poly 0.9) were picked to converge in a
    few CPU minutes at 64 px.
    """
    for name, v, lo in (("epochs", epochs, 1), ("batch_size", batch_size, 2)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name}: expected an int >= {lo}, got {v!r}")
    if not (isinstance(lr, (int, float)) and lr > 0):
        raise ValueError(f"lr: expected a positive float, got {lr!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed: expected a non-negative int, got {seed!r}")
    if classes is not None and not isinstance(classes, Classes):
        raise ValueError(f"classes: expected a blindspots Classes or None, got {type(classes).__name__}")
    images, masks = as_arrays(train_set, "train_set")
    if len(images) < 2:
        raise ValueError(f"train_set: expected at least 2 examples, got {len(images)}")
    val = as_arrays(val_set, "val_set") if val_set is not None else None
    cw = _class_weights(class_weights, masks, _num_classes(model, classes), ignore_index)
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    steps_per_epoch = len(_batches(len(images), batch_size, np.random.default_rng(0)))
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, poly_lambda(epochs * steps_per_epoch))
    config = {"epochs": epochs, "batch_size": batch_size, "lr": lr, "weight_decay": weight_decay, "seed": seed,
              "n_train": int(len(images)), "size": list(images.shape[1:3]), "augment": augment,
              "color_jitter": color_jitter, "class_weights": None if cw is None else [float(v) for v in cw]}
    result = TrainResult(model=model)
    start = 0
    ckpt_path = Path(checkpoint_path) if checkpoint_path is not None else None
    if ckpt_path is not None and resume and ckpt_path.exists():
        start = _resume(ckpt_path, model, optimizer, scheduler, result, arch, config)
    for epoch in range(start, epochs):
        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0]))
            loss = train_epoch(model, images, masks, optimizer, batch_size=batch_size,
                               rng=np.random.default_rng([seed, epoch]), scheduler=scheduler, augment=augment,
                               color_jitter=color_jitter, ignore_index=ignore_index, device=device,
                               progress=progress, desc=f"{arch or 'model'} epoch {epoch + 1}/{epochs}",
                               class_weights=None if cw is None else torch.from_numpy(cw))
        rec: dict[str, float] = {"epoch": epoch + 1, "loss": loss, "lr": optimizer.param_groups[0]["lr"],
                                 "seconds": time.perf_counter() - t0}
        if val is not None:
            pred = predict_labels(model, val[0], device=device)
            rec["val_miou"] = evaluate_segmentation(pred, val[1], _num_classes(model, classes), ignore_index)["miou"]
        result.history.append(rec)
        logger.info("%s epoch %d/%d: %s", arch or "model", epoch + 1, epochs, rec)
        if ckpt_path is not None:
            from blindspots.models.zoo import save_checkpoint

            save_checkpoint(ckpt_path, model, arch=arch, classes=classes,
                            meta={**(meta or {}), "train": config, "history": result.history},
                            extra={"train_state": {"epoch": epoch + 1, "optimizer": optimizer.state_dict(),
                                                   "scheduler": scheduler.state_dict()}})
        if on_epoch_end is not None:
            on_epoch_end(rec)
    model.eval()
    return result


def _class_weights(spec: Any, masks: np.ndarray, num_classes: int, ignore_index: int) -> np.ndarray | None:
    if spec is None:
        return None
    if isinstance(spec, str):
        if spec != "balanced":
            raise ValueError(f"class_weights: expected None, 'balanced' or {num_classes} floats, got {spec!r}")
        return balanced_class_weights(masks, num_classes, ignore_index)
    w = np.asarray(spec, dtype=np.float32)
    if w.shape != (num_classes,) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError(f"class_weights: expected {num_classes} non-negative floats, got shape {w.shape}")
    return w


def _num_classes(model: nn.Module, classes: Classes | None) -> int:
    if classes is not None:
        return classes.num_classes
    last = [m for m in model.modules() if isinstance(m, nn.Conv2d)][-1]
    return int(last.out_channels)


def _resume(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
            result: TrainResult, arch: str | None, config: dict[str, Any]) -> int:
    from blindspots.models.zoo import read_checkpoint

    ckpt = read_checkpoint(path)
    if arch is not None and ckpt["arch"] != arch:
        raise ValueError(f"checkpoint_path: expected a checkpoint of arch {arch!r} to resume, "
                         f"got {ckpt['arch']!r} in {str(path)!r}")
    old = ckpt.get("meta", {}).get("train", {})
    changed = {k: (old.get(k), v) for k, v in config.items() if k in old and old[k] != v and k != "epochs"}
    if changed:
        raise ValueError(f"checkpoint_path: expected the same training settings to resume {str(path)!r}, "
                         f"got changes (old, new): {changed}; pass resume=False to start over")
    state = ckpt.get("train_state")
    if state is None:
        raise ValueError(f"checkpoint_path: expected a training checkpoint with optimizer state, got {str(path)!r}")
    model.load_state_dict(ckpt["state_dict"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    result.history = list(ckpt.get("meta", {}).get("history", []))
    result.resumed_from = int(state["epoch"])
    logger.info("resumed %s from epoch %d", path, state["epoch"])
    return int(state["epoch"])


# ----------------------------------------------------------------------------- the demo zoo

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
    from blindspots.data.scenes import POOL_HARD_FRACTION, SCENE_CLASSES, render_scene_arrays
    from blindspots.models.zoo import ZOO, build_model

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
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed * 1000 + i)  # weight init
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
    tmp = out / "zoo.json.tmp"
    tmp.write_text(json.dumps(summary, indent=2))
    os.replace(tmp, out / "zoo.json")
    return summary


def _save_metrics(path: Path, metrics: dict[str, Any]) -> None:
    """Add validation metrics to a checkpoint's meta (kept atomic)."""
    from blindspots.models.zoo import read_checkpoint

    ckpt = read_checkpoint(path)
    ckpt.setdefault("meta", {})["metrics"] = metrics
    save_checkpoint_dict(path, {k: v for k, v in ckpt.items() if k != FORMAT_KEY}, format=ckpt[FORMAT_KEY])
