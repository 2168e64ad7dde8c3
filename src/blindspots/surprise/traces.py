"""Activation traces (paper Section 3.1, Figure 4) from a torch model behind the foundation adapters.

A forward hook stores a named layer's output; by default the *deepest feature layer* L_f, i.e. the
input of the final classifier (the last executed Conv2d / Linear with one output per class, auxiliary
heads excluded). Segmentation: that [N, d, h0, w0] map is upsampled to the output (label) resolution
with the same interpolation the model uses for its logits (bilinear, align_corners=False — the policy of
``TorchSegmenter`` and torchvision heads — unless told otherwise), so every output pixel has a
d-dimensional trace (the L_AT layer). Classification: a conv layer's trace is its per-channel spatial
mean (the original SA convention); a flat layer's output is used as is.
"""
from __future__ import annotations

from typing import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from blindspots.models.adapters import TorchClassifier, TorchSegmenter, as_image_batch, select_output

INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "nearest-exact")


def argmax_classes(y: torch.Tensor) -> torch.Tensor:
    """argmax over dim 1 of float [n, C, ...] -> int64 [n, ...], the first maximum on ties and the first NaN
    where there is one (as torch.argmax).

    CPU float32 maps [n, C, H, W] take one compiled pass (``_fused_kernels.argmax_channels``): measured on
    [8, 8, 128, 128], 2 threads, 0.8-1.2 ms against 3-6 ms for an amax / compare / weighted-amax in torch
    and 40-70 ms for torch.argmax(dim=1) with the project's torch 2.14 on the 2-core machine (a slow
    non-innermost-axis argmax there). Anything else goes to torch.argmax."""
    if y.ndim == 4 and y.device.type == "cpu" and y.dtype == torch.float32:
        from blindspots.surprise import _fused_kernels as kernels  # numba: imported on first use

        out = np.empty((y.shape[0], *y.shape[2:]), dtype=np.int64)
        # channels-last maps (as some models return) are copied to NCHW first: a copy and the pixel-innermost
        # pass cost about half of a pass with the classes innermost
        kernels.argmax_channels(y.detach().contiguous().numpy(), out)
        return torch.from_numpy(out)
    return y.argmax(dim=1)


class TraceExtractor:
    """Hooks one layer of a torch model and returns its activation traces with the model's probabilities.

    model: a ``TorchSegmenter`` or ``TorchClassifier`` (any adapter exposing a torch module).
    layer: a module name from ``module.named_modules()`` (its output is the trace; append ``"@input"``
        to take the module's input instead); None = the input of the final classifier (paper default).
    interpolation / align_corners: how low-resolution features are brought to the output resolution;
        defaults match how ``TorchSegmenter`` upsamples logits.
    """

    def __init__(self, model: TorchSegmenter | TorchClassifier, layer: str | None = None, *,
                 interpolation: str = "bilinear", align_corners: bool = False) -> None:
        module = getattr(model, "module", None)
        if not isinstance(model, (TorchSegmenter, TorchClassifier)) or not isinstance(module, torch.nn.Module):
            raise ValueError(
                "model: expected a TorchSegmenter or TorchClassifier wrapping a torch nn.Module (layers must be "
                f"reachable for activation traces), got {type(model).__name__}; ONNX, TorchScript-only, callable "
                "or precomputed models expose no layers"
            )
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation: expected one of {INTERPOLATIONS}, got {interpolation!r}")
        self.model = model
        self.module: torch.nn.Module = module
        self.task = "segmentation" if isinstance(model, TorchSegmenter) else "classification"
        self.interpolation = interpolation
        self.align_corners = align_corners
        self.layer = layer if layer is not None else self._default_layer()
        name, _, where = self.layer.partition("@")
        modules = dict(self.module.named_modules())
        if name not in modules:
            sample = [n for n in modules if n][:12]
            raise ValueError(f"layer: expected a module name of the model such as {sample}, got {name!r}")
        if where not in ("", "input", "output"):
            raise ValueError(f"layer: expected 'name', 'name@input' or 'name@output', got {self.layer!r}")
        self._target = modules[name]
        self._use_input = where == "input"

    @property
    def num_classes(self) -> int:
        return int(self.model.num_classes)

    def _default_layer(self) -> str:
        """Name@input of the last executed classifier layer (C outputs, not an auxiliary head)."""
        heads = [(n, m) for n, m in self.module.named_modules()
                 if "aux" not in n.lower() and (
                     (isinstance(m, torch.nn.Conv2d) and m.out_channels == self.model.num_classes)
                     or (isinstance(m, torch.nn.Linear) and m.out_features == self.model.num_classes))]
        if not heads:
            raise ValueError(
                "layer: could not find a final Conv2d/Linear with num_classes outputs to take its input as the "
                "deepest feature layer; pass layer='<module name>' (see module.named_modules())"
            )
        if len(heads) == 1:
            return f"{heads[0][0]}@input"
        order: list[str] = []
        hooks = [m.register_forward_pre_hook(lambda _m, _i, n=n: order.append(n)) for n, m in heads]
        try:
            probe = np.zeros((1, 64, 64, 3), dtype=np.uint8)
            self.model.forward_tensor(probe)
        finally:
            for h in hooks:
                h.remove()
        return f"{(order[-1] if order else heads[-1][0])}@input"

    @torch.no_grad()
    def forward(self, batch: np.ndarray) -> tuple[torch.Tensor, np.ndarray]:
        """One chunk uint8 [n, H, W, 3] -> (features, probabilities).

        Segmentation: features float32 [n, d, h0, w0] at the layer's own resolution, probabilities
        float32 [n, C, H, W]. Classification: traces float32 [n, d], probabilities float32 [n, C].
        """
        feat, y = self._forward_raw(batch)
        proba = torch.softmax(y, dim=1) if self.model.output == "logits" else y
        return feat, proba.cpu().numpy().astype(np.float32, copy=False)

    @torch.no_grad()
    def forward_pred(self, batch: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk uint8 [n, H, W, 3] -> (features as in ``forward``, argmax class int64 [n, H, W] or [n]).

        The argmax is taken on the model output (softmax is monotone), so no probabilities are built."""
        feat, y = self._forward_raw(batch)
        return feat, argmax_classes(y).cpu()

    def _forward_raw(self, batch: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Features (see ``forward``) and the model output float32 (segmentation: at [n, C, H, W])."""
        store: list[torch.Tensor] = []

        def grab(_m, inputs, output=None):
            val = inputs if self._use_input else output
            if isinstance(val, (tuple, list)):
                val = val[0]
            store.append(val)

        hook = (self._target.register_forward_pre_hook(lambda m, i: grab(m, i)) if self._use_input
                else self._target.register_forward_hook(lambda m, i, o: grab(m, i, o)))
        try:
            x = self.model.preprocess(batch, self.model.device)
            y = select_output(self.module(x), self.model.output_key).float()
        finally:
            hook.remove()
        if not store or not isinstance(store[-1], torch.Tensor):
            raise ValueError(f"layer: {self.layer!r} did not produce a tensor during the forward pass")
        feat = store[-1].detach().float()
        if self.task == "segmentation":
            if feat.ndim != 4:
                raise ValueError(f"layer: expected a feature map [N, d, h, w] from {self.layer!r}, got shape "
                                 f"{tuple(feat.shape)}")
            h, w = batch.shape[1:3]
            if y.shape[-2:] != (h, w):
                y = F.interpolate(y, size=(h, w), mode="bilinear", align_corners=False)
        else:
            feat = feat.mean(dim=(2, 3)) if feat.ndim == 4 else feat.reshape(feat.shape[0], -1)
        return feat, y

    def iter_batches(self, images: np.ndarray | Sequence[np.ndarray]
                     ) -> Iterator[tuple[int, torch.Tensor, np.ndarray]]:
        """Yield (start index, features, probabilities) per chunk of ``model.batch_size`` images."""
        batch = as_image_batch(images)
        for start in range(0, batch.shape[0], self.model.batch_size):
            feat, proba = self.forward(batch[start:start + self.model.batch_size])
            yield start, feat, proba

    def upsample(self, features: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
        """float32 [n, d, h0, w0] -> [n, d, H, W] with the model's logit interpolation (L_f -> L_AT)."""
        if tuple(features.shape[-2:]) == tuple(size):
            return features
        kwargs = {"align_corners": self.align_corners} if self.interpolation in ("bilinear", "bicubic") else {}
        return F.interpolate(features, size=size, mode=self.interpolation, **kwargs)

    def pixel_traces(self, features: torch.Tensor, size: tuple[int, int], flat_idx: np.ndarray) -> np.ndarray:
        """Traces float32 [k, d] of the output pixels `flat_idx` (into H*W) of one image's features [d, h0, w0]."""
        up = self.upsample(features[None], size)[0]  # [d, H, W]
        flat = up.reshape(up.shape[0], -1)
        return flat[:, torch.from_numpy(np.asarray(flat_idx, dtype=np.int64))].T.contiguous().cpu().numpy()

    def extract(self, images: np.ndarray | Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """All traces at once (small inputs): segmentation float32 [N, d, H, W] and [N, C, H, W];
        classification float32 [N, d] and [N, C]."""
        feats, probas = [], []
        for _, feat, proba in self.iter_batches(images):
            if self.task == "segmentation":
                feat = self.upsample(feat, proba.shape[-2:])
            feats.append(feat.cpu().numpy())
            probas.append(proba)
        return np.concatenate(feats), np.concatenate(probas)
