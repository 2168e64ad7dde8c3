"""Train or fine-tune a torch image classifier, optionally with a weighted extra set.

The loss is  L(D) + extra_weight * CE(D_extra)  (Defuse's correction objective when D_extra
is the failure-scenario set D_f and extra_weight is λ). Each step takes one batch of D and one
batch of D_extra (cycled). Epoch checkpoints make training resumable; the same seed gives the
same weights, interrupted or not.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from blindspots.models.checkpoints import TRAIN_STATE_FORMAT, save_checkpoint_dict
from blindspots.training.loop import resume_state, run_epochs

logger = logging.getLogger(__name__)

Select = Literal["last", "val", "train"]


def images_to_tensor(images: np.ndarray) -> torch.Tensor:
    """uint8 [N, H, W, C] -> float32 [N, C, H, W] in [0, 1]."""
    return torch.from_numpy(np.ascontiguousarray(images)).permute(0, 3, 1, 2).float().div_(255.0)


@torch.no_grad()
def predict_labels(module: nn.Module, images: np.ndarray, batch_size: int = 1024) -> np.ndarray:
    """Argmax class of a logits module on uint8 [N, H, W, C] images -> int64 [N]."""
    was_training = module.training
    module.eval()
    out = [module(images_to_tensor(images[i:i + batch_size])).argmax(1) for i in range(0, len(images), batch_size)]
    module.train(was_training)
    return torch.cat(out).numpy().astype(np.int64) if out else np.zeros(0, dtype=np.int64)


def accuracy(module: nn.Module, images: np.ndarray, labels: np.ndarray, batch_size: int = 1024) -> float:
    """Fraction of images whose argmax equals the label (NaN for an empty set)."""
    if len(labels) == 0:
        return float("nan")
    return float((predict_labels(module, images, batch_size) == np.asarray(labels)).mean())


@dataclass
class TrainResult:
    """history: one dict per epoch (epoch, loss, val_acc if a validation set is given, train_acc if
    select="train"); best_epoch: the one kept."""

    module: nn.Module
    history: list[dict] = field(default_factory=list)
    best_epoch: int = -1


def _check_xy(images: np.ndarray, labels: np.ndarray, name: str, num_classes: int | None) -> None:
    if images.dtype != np.uint8 or images.ndim != 4:
        raise ValueError(f"{name}: expected uint8 images [N, H, W, C], got {images.dtype} {images.shape}")
    if labels.shape != (len(images),):
        raise ValueError(f"{name}: expected {len(images)} labels, got shape {labels.shape}")
    if num_classes is not None and len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"{name}: expected labels in 0..{num_classes - 1}, got [{labels.min()}, {labels.max()}]")


def train_classifier(
    module: nn.Module,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    epochs: int = 5,
    batch_size: int = 64,
    lr: float = 1.0,
    optimizer: Literal["adadelta", "adam"] = "adadelta",
    seed: int = 0,
    extra_images: np.ndarray | None = None,
    extra_labels: np.ndarray | None = None,
    extra_weight: float = 0.0,
    val_images: np.ndarray | None = None,
    val_labels: np.ndarray | None = None,
    extra_val_images: np.ndarray | None = None,
    extra_val_labels: np.ndarray | None = None,
    select: Select = "last",
    epoch_covers: Literal["images", "both"] = "images",
    checkpoint_path: str | Path | None = None,
    resume: bool = True,
    progress: bool = True,
    desc: str = "train",
) -> TrainResult:
    """Train `module` (logits [N, K]) in place on uint8 [N, H, W, C] images and int [N] labels.

    Defaults are the Defuse MNIST classifier settings (Adadelta, lr 1, 5 epochs, batch 64);
    correction uses optimizer="adam", lr=1e-3, batch 256, 3 epochs (paper appendix B.2).
    select: keep the weights of the last epoch, or of the epoch with the best validation / training
    accuracy (the paper selects per λ by validation accuracy, by training accuracy on MNIST).
    extra_val_images / extra_val_labels: held-out examples like the extra set; with select="val" the
    epoch score is the mean of the accuracy on val and on these (correction: keep D right, fix D_f).
    epoch_covers: "images" — an epoch is one pass over `images` (extra examples are cycled beside
    them); "both" — an epoch is one pass over the larger of `images` and the extra set, the
    smaller one cycled. The paper's MNIST correction makes 235 steps per epoch on 60,000 images;
    on a few thousand images "images" gives D_f only a handful of steps, "both" lets every epoch
    see all of D_f (used by `defuse.correct`).
    """
    images, labels = np.asarray(images), np.asarray(labels).astype(np.int64)
    _check_xy(images, labels, "images", None)
    if len(images) == 0:
        raise ValueError("images: expected at least one training image, got 0")
    num_classes = None
    with torch.no_grad():
        was = module.training
        module.eval()
        num_classes = int(module(images_to_tensor(images[:1])).shape[1])
        module.train(was)
    _check_xy(images, labels, "labels", num_classes)
    has_extra = extra_images is not None and extra_weight > 0
    if has_extra:
        extra_images, extra_labels = np.asarray(extra_images), np.asarray(extra_labels).astype(np.int64)
        _check_xy(extra_images, extra_labels, "extra_images", num_classes)
        if extra_images.shape[1:] != images.shape[1:]:
            raise ValueError(f"extra_images: expected images of shape {images.shape[1:]}, got {extra_images.shape[1:]}")
        if len(extra_images) == 0:
            has_extra = False
    if select == "val" and (val_images is None or val_labels is None):
        raise ValueError("select: 'val' needs val_images and val_labels, got none")
    if select not in ("last", "val", "train"):
        raise ValueError(f"select: expected 'last', 'val' or 'train', got {select!r}")
    if optimizer == "adadelta":
        opt: torch.optim.Optimizer = torch.optim.Adadelta(module.parameters(), lr=lr)
    elif optimizer == "adam":
        opt = torch.optim.Adam(module.parameters(), lr=lr)
    else:
        raise ValueError(f"optimizer: expected 'adadelta' or 'adam', got {optimizer!r}")

    result = TrainResult(module)
    best_state, best_score, start = None, -np.inf, 0
    ckpt = Path(checkpoint_path) if checkpoint_path is not None else None
    state = resume_state(ckpt if resume else None, legacy_keys=("module", "optimizer"))
    if state is not None:
        module.load_state_dict(state["module"])
        opt.load_state_dict(state["optimizer"])
        result.history, start = state["history"], state["epoch"] + 1
        best_state, best_score, result.best_epoch = state["best_state"], state["best_score"], state["best_epoch"]
        logger.info("resuming %s from epoch %d (%s)", desc, start, ckpt)

    x_all = images_to_tensor(images)
    y_all = torch.from_numpy(labels)
    if has_extra:
        xe_all, ye_all = images_to_tensor(extra_images), torch.from_numpy(extra_labels)
    if epoch_covers not in ("images", "both"):
        raise ValueError(f"epoch_covers: expected 'images' or 'both', got {epoch_covers!r}")
    n = len(images)
    per_epoch = max(n, len(extra_images)) if has_extra and epoch_covers == "both" else n
    steps = (per_epoch + batch_size - 1) // batch_size

    def one_epoch(epoch: int) -> float:
        # Seeded per epoch (torch_seed below): a resumed run draws exactly what an uninterrupted one would.
        gen = torch.Generator().manual_seed(seed * 100_003 + epoch)
        perm = torch.randperm(n, generator=gen)
        if per_epoch > n:  # D smaller than D_f under epoch_covers="both": cycle D in fresh orders
            parts = [perm]
            while sum(len(p) for p in parts) < per_epoch:
                parts.append(torch.randperm(n, generator=gen))
            perm = torch.cat(parts)[:per_epoch]
        if has_extra:
            eperm = torch.randperm(len(xe_all), generator=gen)
        module.train()
        total, count, ei = 0.0, 0, 0
        bar = tqdm(range(steps), desc=f"{desc} epoch {epoch + 1}/{epochs}", disable=not progress, leave=False)
        for s in bar:
            idx = perm[s * batch_size:(s + 1) * batch_size]
            loss = F.cross_entropy(module(x_all[idx]), y_all[idx])
            if has_extra:
                take = torch.arange(ei, ei + batch_size) % len(xe_all)
                ei = (ei + batch_size) % len(xe_all)
                eidx = eperm[take]
                loss = loss + extra_weight * F.cross_entropy(module(xe_all[eidx]), ye_all[eidx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
            count += len(idx)
        return total / count

    def end_epoch(epoch: int, loss: float) -> None:
        nonlocal best_state, best_score
        record = {"epoch": epoch, "loss": loss}
        if select == "train":  # a full pass over D costs as much as an epoch; only when it selects
            record["train_acc"] = accuracy(module, images, labels)
        if val_images is not None and val_labels is not None:
            record["val_acc"] = accuracy(module, val_images, val_labels)
        val_score = record.get("val_acc", -1.0)
        if extra_val_images is not None and extra_val_labels is not None and len(extra_val_images):
            record["extra_val_acc"] = accuracy(module, extra_val_images, extra_val_labels)
            val_score = (val_score + record["extra_val_acc"]) / 2
        result.history.append(record)
        score = {"last": float(epoch), "val": val_score, "train": record.get("train_acc", -1.0)}[select]
        if score > best_score:
            best_score, result.best_epoch = score, epoch
            best_state = copy.deepcopy(module.state_dict())
        logger.info("%s epoch %d: %s", desc, epoch, record)
        if ckpt is not None:
            save_checkpoint_dict(ckpt, {"module": module.state_dict(), "optimizer": opt.state_dict(),
                                        "history": result.history, "epoch": epoch, "best_state": best_state,
                                        "best_score": best_score, "best_epoch": result.best_epoch},
                                 format=TRAIN_STATE_FORMAT)

    run_epochs(range(start, epochs), one_epoch, end_epoch=end_epoch, torch_seed=lambda epoch: seed * 100_003 + epoch)
    if best_state is not None:
        module.load_state_dict(best_state)
    module.eval()
    return result
