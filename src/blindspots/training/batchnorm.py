"""BatchNorm running statistics: keep them fixed while the rest trains, copy them, re-estimate them.

Fine-tuning on a few images out of the training distribution moves a model two ways: its weights, and the
running means and variances of its BatchNorm layers (re-estimated, with momentum, on every training batch).
These helpers separate the two: `hold_batchnorm_stats` puts the BN layers in eval mode after `module.train()`
(they normalise with, and keep, the running statistics; their affine weight and bias still learn),
`copy_batchnorm_stats` puts one model's statistics into another of the same architecture, and
`reestimate_batchnorm_stats` recomputes them as the plain average over a labelled set's images.
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm

from blindspots.models.adapters import TorchPreprocess


def batchnorm_layers(module: nn.Module) -> Iterator[tuple[str, _BatchNorm]]:
    """(name, layer) of every BatchNorm layer (1d, 2d, 3d, SyncBatchNorm) of `module` that tracks running stats."""
    for name, m in module.named_modules():
        if isinstance(m, _BatchNorm) and m.track_running_stats:
            yield name, m


def hold_batchnorm_stats(module: nn.Module) -> int:
    """Put every BatchNorm layer of `module` in eval mode (call after `module.train()`); returns how many.

    In eval mode a BN layer normalises with its running mean and variance and does not update them; its
    affine parameters keep their gradients, so they still learn.
    """
    layers = [m for _, m in batchnorm_layers(module)]
    for m in layers:
        m.eval()
    return len(layers)


def copy_batchnorm_stats(source: nn.Module, target: nn.Module) -> None:
    """Copy the running mean, variance and batch count of every BN layer of `source` into `target` (same names)."""
    src = dict(batchnorm_layers(source))
    for name, m in batchnorm_layers(target):
        if name not in src:
            raise ValueError(f"source: expected a BatchNorm layer named {name!r} as in target, got none")
        for buf in ("running_mean", "running_var", "num_batches_tracked"):
            getattr(m, buf).copy_(getattr(src[name], buf))


@torch.no_grad()
def reestimate_batchnorm_stats(module: nn.Module, images: np.ndarray, *, batch_size: int = 8,
                               device: str | torch.device = "cpu",
                               preprocess: Callable[..., torch.Tensor] | None = None) -> None:
    """Recompute every BN layer's running statistics on `images` (uint8 [N, H, W, 3]), the plain average over
    batches (momentum None), with no weight changing; leaves `module` in eval mode."""
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4 or len(images) == 0:
        raise ValueError(f"images: expected a non-empty uint8 [N, H, W, 3] array, got {images.dtype} {images.shape}")
    preprocess = preprocess or TorchPreprocess()
    layers = [m for _, m in batchnorm_layers(module)]
    momenta = [m.momentum for m in layers]
    for m in layers:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average: every batch counts the same
    module.eval()
    for m in layers:
        m.train()
    try:
        for s in range(0, len(images), batch_size):
            module(preprocess(images[s:s + batch_size], device))
    finally:
        for m, mom in zip(layers, momenta):
            m.momentum = mom
        module.eval()
