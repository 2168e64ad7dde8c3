"""Activation traces (paper Section 3.1, Figure 4) from any model that can give feature maps.

Where the features come from (the extractor does not care which kind the model is):
- the model itself, through its ``features(images, layer)`` (torch modules: a forward hook; ONNX: a
  named intermediate tensor added as a graph output); when it also has ``forward_features`` the
  features and the predictions come from ONE forward;
- a separate source (``features=``): ``CallableFeatures`` (a function returning [N, D, h, w] or
  [N, D]) or ``PrecomputedFeatures`` (one ``.npy`` per image id, read with ``ids=``); the
  predictions then come from the model's ``predict_proba`` (by ``ids`` for a precomputed model,
  ``blindspots.models.protocol.predict_segmenter``).

By default (torch) the layer is the *deepest feature layer* L_f, i.e. the input of the final classifier
(the last executed Conv2d / Linear with one output per class, auxiliary heads excluded). Segmentation:
that [N, d, h0, w0] map is upsampled to the output (label) resolution with the same interpolation the
model uses for its logits (bilinear, align_corners=False — the policy of the adapters and torchvision
heads — unless told otherwise), so every output pixel has a d-dimensional trace (the L_AT layer).
Classification: a conv layer's trace is its per-channel spatial mean (the original SA convention); a
flat layer's output is used as is. Raw model outputs become probabilities / classes with the adapters'
own rule (``to_probabilities``): a one-channel output is a binary model.
"""
from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from blindspots.models.adapters import (CallableClassifier, OnnxClassifier, TorchClassifier, as_image_batch)
from blindspots.models.adapters.features import check_features
from blindspots.models.adapters.inputs import NATIVE
from blindspots.models.adapters.outputs import to_probabilities
from blindspots.models.protocol import predict_segmenter, reads_ids

# Lazy imports: numba (its JIT kernels are compiled or loaded by their first call).

INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "nearest-exact")
DEFAULT_BATCH_SIZE = 16  # chunk size for models that batch everything at once (batch_size None)
_CLASSIFIERS = (TorchClassifier, OnnxClassifier, CallableClassifier)


def argmax_classes(y: torch.Tensor) -> torch.Tensor:
    """argmax over dim 1 of float [n, C, ...] -> int64 [n, ...], the first maximum on ties and the first NaN
    where there is one (as torch.argmax).

    CPU float32 maps [n, C, H, W] take one compiled pass (``_fused_kernels.argmax_image``, images split
    over numba's prange by ``_fused_prange.argmax``): torch.argmax(dim=1) along a non-innermost axis is
    slow on CPU with the project's torch (docs/surprise.md, "Speed"). Anything else goes to torch.argmax."""
    if y.ndim == 4 and y.device.type == "cpu" and y.dtype == torch.float32:
        from blindspots.surprise import _fused_prange as passes  # numba: imported on first use

        out = np.empty((y.shape[0], *y.shape[2:]), dtype=np.int64)
        last = y.detach().permute(0, 2, 3, 1)
        if last.is_contiguous():  # channels-last maps (as some models return): transposed a row at a time
            passes.argmax(last.numpy(), out, channels_last=True)
        else:
            passes.argmax(y.detach().contiguous().numpy(), out, channels_last=False)
        return torch.from_numpy(out)
    return y.argmax(dim=1)


def classes_from_scores(y: torch.Tensor, kind: str, keep_device: bool = False) -> torch.Tensor:
    """Predicted class int64 [n, ...] of a model output float [n, C, ...] of `kind` (see
    ``TraceExtractor.forward_scores``): the argmax, or for one channel (binary) logit > 0 / probability > 0.5
    (the argmax of [1 - p, p]). On the CPU unless `keep_device` (then where `y` is)."""
    if y.shape[1] == 1 and kind in ("logits", "probabilities"):
        return (y[:, 0] > (0.0 if kind == "logits" else 0.5)).long()
    pred = argmax_classes(y)
    return pred if keep_device else pred.cpu()


class TraceExtractor:
    """Reads one layer's feature maps of a model and returns its activation traces with the model's predictions.

    model: any blindspots adapter (Segmenter or Classifier: torch, ONNX, callable, precomputed, ...); it
        gives the predictions and, unless `features` is given, the features (its ``features(images, layer)``).
    layer: torch: a module name from ``module.named_modules()`` (its output is the trace; append ``"@input"``
        to take the module's input instead), None = the input of the final classifier (paper default);
        ONNX: the name of an intermediate tensor (required), e.g. ``"/backbone/layer3/Relu_output_0"``;
        a callable feature source gets it as its second argument; precomputed features ignore it.
    features: a separate feature source (``CallableFeatures``, ``PrecomputedFeatures`` or anything with
        ``features(images, layer)`` / ``features_ids(ids, layer)``); None = the model's own.
    interpolation / align_corners: how low-resolution features are brought to the output resolution;
        defaults match how the adapters upsample logits.
    """

    def __init__(self, model: Any, layer: str | None = None, *, features: Any = None,
                 interpolation: str = "bilinear", align_corners: bool = False) -> None:
        if not hasattr(model, "num_classes") or not hasattr(model, "predict_proba"):
            raise ValueError(f"model: expected a blindspots model adapter (num_classes, predict_proba), "
                             f"got {type(model).__name__}")
        source = model if features is None else features
        if not (callable(getattr(source, "features", None)) or callable(getattr(source, "features_ids", None))):
            what = "model" if features is None else "features"
            raise ValueError(
                f"{what}: expected a model or source that gives feature maps (torch, ONNX, CallableFeatures, "
                f"PrecomputedFeatures), got {type(source).__name__}; pass features= (a callable or precomputed "
                "feature maps) for other models")
        if interpolation not in INTERPOLATIONS:
            raise ValueError(f"interpolation: expected one of {INTERPOLATIONS}, got {interpolation!r}")
        self.model = model
        self.source = source
        self.task = "classification" if isinstance(model, _CLASSIFIERS) else "segmentation"
        self.interpolation = interpolation
        self.align_corners = align_corners
        if layer is None and hasattr(source, "default_feature_layer"):
            layer = source.default_feature_layer()
        self.layer = layer
        if layer is not None and hasattr(source, "check_feature_layer"):
            source.check_feature_layer(layer)
        # one forward gives features and scores when the model is its own feature source
        self._one_pass = features is None and callable(getattr(model, "forward_features", None))
        self.by_id = callable(getattr(source, "features_ids", None))

    @property
    def num_classes(self) -> int:
        return int(self.model.num_classes)

    @property
    def batch_size(self) -> int:
        """Images per chunk: the model's batch size (16 for models that take any batch at once)."""
        return int(getattr(self.model, "batch_size", None) or DEFAULT_BATCH_SIZE)

    @torch.no_grad()
    def forward(self, batch: np.ndarray, ids: Sequence[str] | None = None) -> tuple[torch.Tensor, np.ndarray]:
        """One chunk uint8 [n, H, W, 3] -> (features, probabilities).

        ids: the n image ids (needed for features or predictions read by id, e.g. precomputed).
        Segmentation: features float32 [n, d, h0, w0] at the layer's own resolution, probabilities
        float32 [n, C, H, W]. Classification: traces float32 [n, d], probabilities float32 [n, C].
        """
        feat, y, kind = self._forward_raw(batch, ids)
        if kind == "proba":
            return feat, y.numpy()
        proba = to_probabilities(y, kind, self.num_classes, "model output")
        return feat, proba.astype(np.float32, copy=False)

    @torch.no_grad()
    def forward_pred(self, batch: np.ndarray, ids: Sequence[str] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """One chunk uint8 [n, H, W, 3] -> (features as in ``forward``, argmax class int64 [n, H, W] or [n]).

        The argmax is taken on the model output (softmax is monotone), so no probabilities are built; a
        one-channel (binary) output is thresholded (logit > 0, probability > 0.5: the argmax of [1 - p, p])."""
        feat, y, kind = self._forward_raw(batch, ids)
        return feat, classes_from_scores(y, kind)

    @torch.no_grad()
    def forward_scores(self, batch: np.ndarray, ids: Sequence[str] | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, str]:
        """One chunk uint8 [n, H, W, 3] -> (features as in ``forward``, the model output float32 (segmentation:
        [n, C or 1, H, W] at the input resolution), its kind: "logits", "probabilities" or "proba"), for
        callers that take the argmax themselves (``classes_from_scores`` gives ``forward_pred``'s)."""
        return self._forward_raw(batch, ids)

    def _features(self, batch: np.ndarray, ids: Sequence[str] | None) -> torch.Tensor:
        """Features float32 [n, D, h, w] (or [n, D]) of one chunk from the separate source."""
        n = batch.shape[0]
        if self.by_id:
            if ids is None:
                raise ValueError("ids: expected the image ids of the batch (features are read by id, e.g. "
                                 "precomputed .npy maps), got None")
            if len(ids) != n:
                raise ValueError(f"ids: expected {n} ids (one per image), got {len(ids)}")
            out = self.source.features_ids(list(ids), self.layer)
        else:
            out = self.source.features(batch, self.layer)
        return check_features(out, n, "features")

    def _predictions(self, batch: np.ndarray, ids: Sequence[str] | None) -> torch.Tensor:
        """Probabilities float32 [n, C, H, W] / [n, C] of one chunk from the model's own prediction call."""
        if reads_ids(self.model) and ids is None:
            raise ValueError("ids: expected the image ids of the batch (the model's predictions are read by "
                             "id), got None")
        return torch.from_numpy(np.asarray(predict_segmenter(self.model, batch, ids), dtype=np.float32))

    def _forward_raw(self, batch: np.ndarray, ids: Sequence[str] | None
                     ) -> tuple[torch.Tensor, torch.Tensor, str]:
        """Features (see ``forward``), the model output float32 (segmentation: at [n, C or 1, H, W]) and its
        kind: the model's `output` ("logits" / "probabilities") or "proba" (already [n, C, ...] probabilities)."""
        h, w = batch.shape[1:3]
        if self._one_pass:
            policy = getattr(self.model, "policy", NATIVE)
            if policy.pad is not None:
                raise ValueError(f"model: expected no pad= input policy for feature maps (padding shifts them "
                                 f"against the image), got {policy}")
            chunk = policy.prepare(batch) if self.task == "segmentation" else batch
            feat, y = self.model.forward_features(chunk, self.layer)
            kind = self.model.output
        else:
            feat, y, kind = self._features(batch, ids), self._predictions(batch, ids), "proba"
        if self.task == "segmentation":
            if feat.ndim != 4:
                raise ValueError(f"layer: expected a feature map [N, d, h, w] from {self.layer!r}, got shape "
                                 f"{tuple(feat.shape)}")
            if y.ndim != 4:
                raise ValueError(f"model output: expected [N, C, H, W] scores, got shape {tuple(y.shape)}")
            if y.shape[-2:] != (h, w):
                y = F.interpolate(y, size=(h, w), mode="bilinear", align_corners=False)
        else:
            feat = feat.mean(dim=(2, 3)) if feat.ndim == 4 else feat.reshape(feat.shape[0], -1)
        return feat, y, kind

    def iter_batches(self, images: np.ndarray | Sequence[np.ndarray], ids: Sequence[str] | None = None
                     ) -> Iterator[tuple[int, torch.Tensor, np.ndarray]]:
        """Yield (start index, features, probabilities) per chunk of ``batch_size`` images (ids: one per image)."""
        batch = as_image_batch(images)
        if ids is not None and len(ids) != batch.shape[0]:
            raise ValueError(f"ids: expected {batch.shape[0]} ids (one per image), got {len(ids)}")
        bs = self.batch_size
        for start in range(0, batch.shape[0], bs):
            part = None if ids is None else list(ids[start:start + bs])
            feat, proba = self.forward(batch[start:start + bs], part)
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

    def extract(self, images: np.ndarray | Sequence[np.ndarray], ids: Sequence[str] | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
        """All traces at once (small inputs): segmentation float32 [N, d, H, W] and [N, C, H, W];
        classification float32 [N, d] and [N, C]. ids: the image ids (for features read by id)."""
        feats, probas = [], []
        for _, feat, proba in self.iter_batches(images, ids):
            if self.task == "segmentation":
                feat = self.upsample(feat, proba.shape[-2:])
            feats.append(feat.cpu().numpy())
            probas.append(proba)
        return np.concatenate(feats), np.concatenate(probas)
