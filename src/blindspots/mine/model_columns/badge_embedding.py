"""BADGE's gradient embedding of a segmenter: the last layer's loss gradient w.r.t. its weights, per image.

Ash, Zhang, Krishnamurthy, Langford & Agarwal 2020, "Deep Batch Active Learning by Diverse, Uncertain
Gradient Lower Bounds" (ICLR, arXiv:1906.03671), Section 3: g_x = d/d(theta_out) of the cross-entropy of
the network's output with the network's own hard prediction y_hat = argmax p as the label, theta_out the
weights of the last layer. For a classifier with penultimate features h and probabilities p that is
g_x = (p - e_{y_hat}) (x) h, a K x D matrix (the paper's implementation leaves the bias out; so do we).

For a segmenter the last layer is its classifier layer, a 1x1 Conv2d applied at every position of the
feature map h [D, h, w], and the loss is the mean over the output's pixels u of the pixel cross-entropy
with the pixel's own hard prediction. Its gradient w.r.t. the conv weight W [K, D] is, by linearity, the
mean over the output's pixels of the per-pixel gradient embeddings:

    g = 1/P sum_u (p_u - e_{y_hat_u}) (x) h_u,

with h_u the feature map carried to pixel u the way the logits are (as is, cropped, or bilinearly resized
to the image: the model's own path from its classifier layer to its output). It is computed without
materialising pixels x K x D: autograd gives r = dL/dz [K, h, w] at the classifier layer's output z (for
an output as is, r = (p - e_y_hat) / P), then one contraction g = sum_{hw} r h^T. A one-channel binary
head (sigmoid) gives K = 1: g = mean_u (sigmoid_u - y_hat_u) h_u.

What it needs: a torch model whose classifier layer (`default_feature_layer`, or `layer=`) is a 1x1
Conv2d (stride 1, no padding, groups 1) on [n, D, h, w] features, whose output is that layer's output
as is, cropped or resized (`head_output.post_head`), as logits. Anything else is a ValueError that
says so (the weight gradient is then not (p - e) (x) h).

Public API: `gradient_embedding(segmenter, images, layer=None) -> float32 [n, K * D]` (row-major: class
k's D weights at k * D ... k * D + D - 1).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from blindspots.mine.model_columns.head_output import post_head, to_proba


def check_head(head: torch.nn.Module, layer: str) -> None:
    """ValueError unless `head` is a 1x1 Conv2d whose weight gradient is (p - e) (x) h at each position."""
    ok = (isinstance(head, torch.nn.Conv2d) and tuple(head.kernel_size) == (1, 1) and tuple(head.stride) == (1, 1)
          and tuple(head.padding) in ((0, 0), "valid") and head.groups == 1)
    if not ok:
        got = (f"Conv2d(kernel {tuple(head.kernel_size)}, stride {tuple(head.stride)}, padding {head.padding}, "
               f"groups {head.groups})" if isinstance(head, torch.nn.Conv2d) else type(head).__name__)
        raise ValueError(
            f"layer: BADGE expected the classifier layer {layer!r} to be a 1x1 Conv2d (stride 1, no padding, "
            f"groups 1) on [n, D, h, w] features, so that its weight gradient is (p - onehot) x features, got {got}; "
            "pass the layer= of such a head or use another strategy (coreset, margin, entropy)")


def gradient_embedding(segmenter: Any, images: np.ndarray, layer: str | None = None,
                       features: tuple[torch.Tensor, torch.Tensor] | None = None) -> np.ndarray:
    """float32 [n, K * D]: BADGE's per-image gradient embedding (see the module docstring).

    segmenter: a `TorchSegmenter`; images: uint8 [n, H, W, 3]; layer: `name@input` of the classifier
    layer (None: its default feature layer). features: (feats [n, D, h, w], output [n, K, h', w']) of
    `segmenter.forward_features` when the caller already ran it (one forward serves both).
    """
    layer = layer or segmenter.default_feature_layer()
    head, use_input = segmenter._layer_target(layer)
    if not use_input:
        raise ValueError(f"layer: BADGE expected the input of the classifier layer ('name@input'), got {layer!r}")
    check_head(head, layer)
    if getattr(segmenter, "output", "logits") != "logits":
        raise ValueError(f"segmenter: BADGE expected a model whose output is logits (the cross-entropy's input), "
                         f"got output={segmenter.output!r}")
    feats, y = features if features is not None else segmenter.forward_features(images, layer)
    if feats.ndim != 4:
        raise ValueError(f"layer: BADGE expected [n, D, h, w] features at {layer!r}, got shape {tuple(feats.shape)}")
    feats = feats.float()
    with torch.no_grad():
        z0 = head(feats).float()
    post = post_head(z0, y)
    if post is None:
        raise ValueError(f"segmenter: BADGE expected the model's output to be the output of {layer!r} as is, "
                         "cropped or bilinearly resized; this model changes it otherwise, so the last layer's "
                         "gradient is not (p - onehot) x features")
    with torch.enable_grad():
        z = z0.detach().requires_grad_(True)
        p = to_proba(segmenter, post(z), images.shape[1:3])  # [n, K', H, W]
        hard = p.detach().argmax(1, keepdim=True)  # the model's own prediction as the label
        nll = -torch.log(p.gather(1, hard).clamp_min(1e-30))
        (r,) = torch.autograd.grad(nll.flatten(1).mean(1).sum(), z)  # images are independent: per-image grads
    g = torch.einsum("nkhw,ndhw->nkd", r.double(), feats.double())  # [n, K, D], never pixels x K x D
    return g.reshape(len(g), -1).cpu().numpy().astype(np.float32)
