"""The Defuse paper's classifier architectures for MNIST-like data, sized by image shape.

- "defuse_cnn": Defuse appendix Figure 7 — 4x4 conv 64 ReLU stride 2 (x4, fewer for small
  images so the map never shrinks below 1x1), FC 256 ReLU, FC 256 ReLU, FC K.
- "pytorch_mnist": the PyTorch MNIST example the paper cites (Paszke et al. 2019) — 3x3 conv 32,
  3x3 conv 64, 2x2 max-pool, dropout 0.25, FC 128, dropout 0.5, FC K.

Models take float [N, C, H, W] in [0, 1] (see `UNIT_PREPROCESS`) and return logits [N, K].
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from torch import nn

from blindspots.models.adapters import TorchClassifier, TorchPreprocess
from blindspots.models.checkpoints import CLASSIFIER_FORMAT, FORMAT_KEY, load_checkpoint_dict, save_checkpoint_dict

# Classifiers here see pixels scaled to [0, 1] (no mean/std shift), like the VAE decoder's output.
UNIT_PREPROCESS = TorchPreprocess(mean=(0.0, 0.0, 0.0), std=(1.0, 1.0, 1.0))


def _check_shape(image_shape: tuple[int, int, int]) -> tuple[int, int, int]:
    if len(image_shape) != 3 or min(image_shape) < 1 or image_shape[2] not in (1, 3):
        raise ValueError(f"image_shape: expected (H, W, C) with C in (1, 3), got {image_shape}")
    return int(image_shape[0]), int(image_shape[1]), int(image_shape[2])


def defuse_cnn(num_classes: int, image_shape: tuple[int, int, int], width: int = 64, hidden: int = 256,
               max_convs: int = 4) -> nn.Module:
    """Defuse Figure 7 CNN. width: conv channels (paper 64); hidden: FC size (paper 256)."""
    h, w, c = _check_shape(image_shape)
    n_conv = max(1, min(max_convs, int(math.log2(min(h, w)))))
    layers: list[nn.Module] = []
    ch = c
    for _ in range(n_conv):
        layers += [nn.Conv2d(ch, width, 4, stride=2, padding=1), nn.ReLU(inplace=True)]
        ch = width
        h, w = (h + 2 - 4) // 2 + 1, (w + 2 - 4) // 2 + 1
    layers += [nn.Flatten(), nn.Linear(ch * h * w, hidden), nn.ReLU(inplace=True),
               nn.Linear(hidden, hidden), nn.ReLU(inplace=True), nn.Linear(hidden, num_classes)]
    return nn.Sequential(*layers)


def pytorch_mnist(num_classes: int, image_shape: tuple[int, int, int]) -> nn.Module:
    """The PyTorch MNIST example network (the paper's MNIST classifier reference)."""
    h, w, c = _check_shape(image_shape)
    if min(h, w) < 6:
        raise ValueError(f"image_shape: pytorch_mnist needs images of at least 6x6, got {h}x{w}")
    fh, fw = (h - 4) // 2, (w - 4) // 2
    return nn.Sequential(
        nn.Conv2d(c, 32, 3), nn.ReLU(inplace=True), nn.Conv2d(32, 64, 3), nn.ReLU(inplace=True),
        nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(64 * fh * fw, 128),
        nn.ReLU(inplace=True), nn.Dropout(0.5), nn.Linear(128, num_classes))


CLASSIFIER_ZOO: dict[str, Callable[..., nn.Module]] = {"defuse_cnn": defuse_cnn, "pytorch_mnist": pytorch_mnist}


def build_classifier(arch: str, num_classes: int, image_shape: tuple[int, int, int], **kwargs: Any) -> nn.Module:
    """Build a zoo classifier (weights randomly initialised by torch's global generator)."""
    if arch not in CLASSIFIER_ZOO:
        raise ValueError(f"arch: expected one of {sorted(CLASSIFIER_ZOO)}, got {arch!r}")
    if num_classes < 2:
        raise ValueError(f"num_classes: expected at least 2, got {num_classes}")
    return CLASSIFIER_ZOO[arch](num_classes, tuple(image_shape), **kwargs)


def save_classifier(path: str | Path, module: nn.Module, *, arch: str, class_names: tuple[str, ...] | list[str],
                    image_shape: tuple[int, int, int], kwargs: dict | None = None, meta: dict | None = None) -> Path:
    """Write a checkpoint that `load_classifier` rebuilds without the caller knowing the architecture."""
    return save_checkpoint_dict(path, {"arch": arch, "kwargs": dict(kwargs or {}), "class_names": list(class_names),
                                       "image_shape": list(image_shape), "state_dict": module.state_dict(),
                                       "meta": dict(meta or {})}, format=CLASSIFIER_FORMAT)


def load_classifier_module(path: str | Path) -> tuple[nn.Module, dict]:
    """(module in eval mode, info dict with arch, kwargs, class_names, image_shape, meta)."""
    # untagged files: written before the format tag, same plain data
    info = load_checkpoint_dict(path, format=CLASSIFIER_FORMAT, legacy_keys=("arch", "state_dict"),
                                what="blindspots classifier checkpoint")
    module = build_classifier(info["arch"], len(info["class_names"]), tuple(info["image_shape"]), **info["kwargs"])
    module.load_state_dict(info["state_dict"])
    module.eval()
    return module, {k: v for k, v in info.items() if k not in ("state_dict", FORMAT_KEY)}


def as_classifier(module: nn.Module, num_classes: int, *, batch_size: int = 256, device: str = "cpu"
                  ) -> TorchClassifier:
    """Wrap a zoo module as a `Classifier` taking uint8 images (scaled to [0, 1])."""
    return TorchClassifier(module, num_classes, output="logits", preprocess=UNIT_PREPROCESS,
                           batch_size=batch_size, device=device)


def load_classifier(path: str | Path, *, batch_size: int = 256, device: str = "cpu") -> TorchClassifier:
    """A checkpoint from `save_classifier` as a `Classifier`."""
    module, info = load_classifier_module(path)
    return as_classifier(module, len(info["class_names"]), batch_size=batch_size, device=device)
