"""How a segmenter's output comes from its classifier layer's output, and raw outputs as probabilities.

Shared by the acquisition columns (MC dropout on the head alone) and BADGE's gradient embedding (the
path from the head to the loss). torch only.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def post_head(y_head: torch.Tensor, y: torch.Tensor) -> Any:
    """How the model's output y [n, C, H, W] comes from its classifier layer's output: identity, a crop
    or a bilinear resize (a function), or None when it is none of those."""
    if y_head.shape == y.shape and torch.allclose(y_head, y, atol=1e-5):
        return lambda t: t
    if y_head.ndim == 4 and y_head.shape[:2] == y.shape[:2]:
        h, w = y.shape[-2:]
        if y_head.shape[-2] >= h and y_head.shape[-1] >= w and torch.allclose(y_head[..., :h, :w], y, atol=1e-5):
            return lambda t: t[..., :h, :w]
        resized = F.interpolate(y_head, size=(h, w), mode="bilinear", align_corners=False)
        if torch.allclose(resized, y, atol=1e-5):
            return lambda t: F.interpolate(t, size=(h, w), mode="bilinear", align_corners=False)
    return None


def to_proba(segmenter: Any, logits: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Raw output [n, C, h, w] -> probabilities [n, C, H, W] at the image size (softmax unless the
    model already gives probabilities; one channel is a binary model: [1 - p, p])."""
    y = logits.float()
    if y.shape[-2:] != tuple(size):
        y = F.interpolate(y, size=tuple(size), mode="bilinear", align_corners=False)
    if y.shape[1] == 1:
        p = y if getattr(segmenter, "output", "logits") == "probabilities" else torch.sigmoid(y)
        return torch.cat([1 - p, p], 1)
    return y if getattr(segmenter, "output", "logits") == "probabilities" else y.softmax(1)
