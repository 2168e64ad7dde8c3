"""Training segmentation models on CPU: one epoch's pass (`train_epoch`), checkpoints every epoch, resume.

`train_segmenter` trains a module (e.g. from `models.zoo.build_model`) on a labelled set with
AdamW and a poly learning-rate decay (power 0.9, the DeepLab schedule the MAD paper's models use);
AdamW because it converges in a few epochs from random initialisation on CPU where plain SGD needs
many more. Cross-entropy ignores `ignore_index` (255). Horizontal flips are the only default
augmentation: the target model must stay narrow (no brightness/colour jitter unless asked), so
that it fails on the conditions it never saw.

Determinism: the epoch's shuffle, flips and torch's own randomness (dropout) come from
(seed, epoch), inside `torch.random.fork_rng` so the global torch RNG is left untouched; an
interrupted run resumed from its checkpoint gives the same weights as an uninterrupted one.

The epochs, poly schedule, per-epoch RNG and resume helpers are `training.loop`'s (shared with replay
fine-tuning, classifier training and the β-VAE); `train_epoch` is this trainer's body.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from blindspots._validation import check_int, check_number, check_seed
from blindspots.data.classes import Classes
from blindspots.metrics import ConfusionMatrix, per_image_miou
from blindspots.models.adapters import TorchPreprocess
from blindspots.models.zoo import read_checkpoint, save_checkpoint
from blindspots.training.loop import poly_lambda, run_epochs
from blindspots.training.precision import MixedPrecision

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
    amp: MixedPrecision | None = None,
) -> float:
    """One pass over (images uint8 [N, H, W, 3], masks int [N, H, W]); returns the mean loss.

    scheduler: stepped after every optimizer step (e.g. a poly LambdaLR). augment: random
    horizontal flips. color_jitter: per-image brightness/contrast jitter amplitude (0 = off).
    Batches, flips and jitter come from `rng`. class_weights: float [C] cross-entropy weights.
    amp: the run's device and precision (default: `device` at its training precision, fp32 on CPU).
    """
    amp = amp or MixedPrecision(device)
    device = amp.device
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
        with amp.autocast():
            logits = model(x)
        if isinstance(logits, dict):
            logits = logits["out"]
        weight = None if class_weights is None else class_weights.to(logits.device)
        loss = F.cross_entropy(logits.float(), y, weight=weight, ignore_index=ignore_index)
        optimizer.zero_grad(set_to_none=True)
        amp.step(loss, optimizer)
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
    precision: str = "auto",
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
    device: "cpu" (default), "cuda", "cuda:N" or "auto". precision: "auto" (bf16/fp16 autocast on
        CUDA, fp32 on the CPU), "fp32", "fp16" or "bf16" (`training.precision.MixedPrecision`).
    Returns a TrainResult (model, per-epoch history, epoch resumed from).
    Defaults (AdamW lr 2e-3, weight decay 1e-4, batch 16, poly 0.9) were picked to converge in a
    few CPU minutes at 64 px.
    """
    # plain ints: they go into the checkpoint, which loads weights-only (no numpy scalars)
    epochs, batch_size = check_int(epochs, "epochs"), check_int(batch_size, "batch_size", minimum=2)
    check_number(lr, "lr", low=0, low_open=True)
    seed = check_seed(seed)
    if classes is not None and not isinstance(classes, Classes):
        raise ValueError(f"classes: expected a blindspots Classes or None, got {type(classes).__name__}")
    images, masks = as_arrays(train_set, "train_set")
    if len(images) < 2:
        raise ValueError(f"train_set: expected at least 2 examples, got {len(images)}")
    val = as_arrays(val_set, "val_set") if val_set is not None else None
    cw = _class_weights(class_weights, masks, _num_classes(model, classes), ignore_index)
    amp = MixedPrecision(device, precision)  # one loss scaler for the whole run (fp16)
    device = amp.device
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

    def one_epoch(epoch: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        loss = train_epoch(model, images, masks, optimizer, batch_size=batch_size,
                           rng=np.random.default_rng([seed, epoch]), scheduler=scheduler, augment=augment,
                           color_jitter=color_jitter, ignore_index=ignore_index, device=device,
                           progress=progress, desc=f"{arch or 'model'} epoch {epoch + 1}/{epochs}",
                           class_weights=None if cw is None else torch.from_numpy(cw), amp=amp)
        return loss, t0

    def end_epoch(epoch: int, out: tuple[float, float]) -> None:
        loss, t0 = out
        rec: dict[str, float] = {"epoch": epoch + 1, "loss": loss, "lr": optimizer.param_groups[0]["lr"],
                                 "seconds": time.perf_counter() - t0}
        if val is not None:
            pred = predict_labels(model, val[0], device=device)
            rec["val_miou"] = evaluate_segmentation(pred, val[1], _num_classes(model, classes), ignore_index)["miou"]
        result.history.append(rec)
        logger.info("%s epoch %d/%d: %s", arch or "model", epoch + 1, epochs, rec)
        if ckpt_path is not None:
            save_checkpoint(ckpt_path, model, arch=arch, classes=classes,
                            meta={**(meta or {}), "train": config, "history": result.history},
                            extra={"train_state": {"epoch": epoch + 1, "optimizer": optimizer.state_dict(),
                                                   "scheduler": scheduler.state_dict()}})
        if on_epoch_end is not None:
            on_epoch_end(rec)

    run_epochs(range(start, epochs), one_epoch, end_epoch=end_epoch,
               torch_seed=lambda epoch: int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0]))
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
