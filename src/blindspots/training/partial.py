"""Training from partial labels: masks whose unlabelled pixels hold the ignore value (region answers,
`blindspots.human.regions.partial_mask`; a whole mask is the case with none ignored).

`masked_cross_entropy` is the loss replay fine-tuning minimises: the mean cross-entropy over the
labelled pixels only, so an ignored pixel adds nothing to the loss and its logits get exactly zero
gradient (tested); a batch without a labelled pixel gives None (no step), not NaN.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from blindspots.data.classes import DEFAULT_IGNORE_INDEX

__all__ = ["masked_cross_entropy"]


def masked_cross_entropy(logits: torch.Tensor, masks: torch.Tensor, *,
                         ignore_index: int = DEFAULT_IGNORE_INDEX, labelled: bool | None = None) -> torch.Tensor | None:
    """Mean cross-entropy of float [B, C, H, W] logits against int64 [B, H, W] masks over the pixels
    whose mask is not `ignore_index`; None when there is no such pixel. labelled: whether any pixel is
    labelled, when the caller knows it from a host copy of the masks (no wait for the device); None: read here."""
    if logits.ndim != 4 or masks.ndim != 3 or logits.shape[0] != masks.shape[0] \
            or logits.shape[-2:] != masks.shape[-2:]:
        raise ValueError(f"logits, masks: expected [B, C, H, W] and [B, H, W] of one B, H, W, got "
                         f"{tuple(logits.shape)} and {tuple(masks.shape)}")
    if not (labelled if labelled is not None else bool((masks != ignore_index).any())):
        return None
    return F.cross_entropy(logits, masks, ignore_index=ignore_index)

