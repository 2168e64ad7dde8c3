"""ONNX models: export a torch module to an .onnx file and run one with onnxruntime (CPU).

`OnnxSegmenter` / `OnnxClassifier` follow the Segmenter / Classifier protocols of
`blindspots.models.adapters`: uint8 [N, H, W, 3] in, float32 probabilities out.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from blindspots.models.adapters import (
    IMAGENET_MEAN,
    IMAGENET_STD,
    OutputKind,
    as_image_batch,
    check_probabilities,
    probe_num_classes,
)

log = logging.getLogger(__name__)


def export_onnx(
    module: torch.nn.Module,
    path: str | Path,
    *,
    height: int = 128,
    width: int = 128,
    output_key: str | None = None,
    opset: int = 17,
) -> Path:
    """Export `module` (float [N, 3, H, W] -> [N, C, h, w] or a dict) to ONNX with dynamic N, H, W.

    Uses the TorchScript-based exporter (`dynamo=False`), which needs no extra packages and
    keeps batch and spatial axes dynamic. output_key: the dict key to export (torchvision "out").
    Returns the written path.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    model = _SelectOutput(module, output_key).eval()
    example = torch.zeros(1, 3, int(height), int(width))
    with torch.no_grad():
        torch.onnx.export(
            model, (example,), str(path), input_names=["images"], output_names=["scores"],
            dynamic_axes={"images": {0: "n", 2: "h", 3: "w"}, "scores": {0: "n"}},
            opset_version=opset, dynamo=False,
        )
    return path


class _SelectOutput(torch.nn.Module):
    """Wrap a module so that its export has exactly one tensor output."""

    def __init__(self, module: torch.nn.Module, output_key: str | None) -> None:
        super().__init__()
        self.module = module
        self.output_key = output_key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.module(x)
        if isinstance(out, dict):
            return out[self.output_key or "out"]
        if isinstance(out, (tuple, list)):
            return out[0]
        return out


class _OnnxAdapter:
    """Shared onnxruntime session, preprocessing and batching."""

    _spatial = True

    def __init__(
        self,
        path: str | Path,
        num_classes: int | None = None,
        *,
        output: OutputKind = "logits",
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        batch_size: int = 16,
        input_name: str | None = None,
        output_name: str | None = None,
        intra_op_threads: int = 0,
    ) -> None:
        import onnxruntime as ort  # imported here: only ONNX users pay for it

        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"path: expected an existing .onnx file, got {str(self.path)!r}")
        if output not in ("logits", "probabilities"):
            raise ValueError(f"output: expected 'logits' or 'probabilities', got {output!r}")
        if batch_size < 1:
            raise ValueError(f"batch_size: expected a positive integer, got {batch_size}")
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(intra_op_threads)  # 0 = onnxruntime's default
        try:
            self.session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise ValueError(f"path: expected a valid ONNX model, got {str(self.path)!r}: {e}") from None
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        self.input_name = input_name or next(iter(inputs))
        if self.input_name not in inputs:
            raise ValueError(f"input_name: expected one of {sorted(inputs)}, got {input_name!r}")
        self.output_name = output_name or outputs[0]
        if self.output_name not in outputs:
            raise ValueError(f"output_name: expected one of {outputs}, got {output_name!r}")
        fixed = inputs[self.input_name].shape[0]
        # A model exported with a fixed batch axis is fed chunks of exactly that size (last one padded).
        self.fixed_batch = fixed if isinstance(fixed, int) and fixed > 0 else None
        self.output = output
        self.batch_size = self.fixed_batch or int(batch_size)
        self.mean = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
        self.std = np.asarray(std, dtype=np.float32).reshape(1, -1, 1, 1)
        self.num_classes = int(num_classes) if num_classes is not None else probe_num_classes(
            self._forward, self._spatial, "ONNX output")

    def _forward(self, chunk: np.ndarray) -> np.ndarray:
        """uint8 [n, H, W, C] -> raw model output (no validation)."""
        n = len(chunk)
        x = chunk.transpose(0, 3, 1, 2).astype(np.float32) / 255.0
        c = x.shape[1]
        x = (x - self.mean[:, :c]) / self.std[:, :c]
        if self.fixed_batch and n < self.fixed_batch:
            x = np.concatenate([x, np.repeat(x[-1:], self.fixed_batch - n, axis=0)])
        out = self.session.run([self.output_name], {self.input_name: np.ascontiguousarray(x)})[0]
        return out[:n]

    def _predict(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        batch = as_image_batch(images)
        n, h, w = batch.shape[:3]
        outs = []
        for start in range(0, n, self.batch_size):
            y = self._forward(batch[start:start + self.batch_size])
            if self._spatial and y.ndim == 4 and y.shape[-2:] != (h, w):
                # Same policy as TorchSegmenter: bilinear upsampling of the scores to label resolution.
                y = torch.nn.functional.interpolate(torch.from_numpy(y).float(), size=(h, w), mode="bilinear",
                                                    align_corners=False).numpy()
            outs.append(y)
        out = outs[0] if len(outs) == 1 else np.concatenate(outs)
        shape: tuple[int, ...] = (n, self.num_classes, h, w) if self._spatial else (n, self.num_classes)
        return check_probabilities(out, expected_shape=shape, output=self.output, name="ONNX output")


class OnnxSegmenter(_OnnxAdapter):
    """An .onnx file run with onnxruntime (CPU) as a Segmenter.

    The graph maps float [N, 3, H, W] (ImageNet-normalised, as TorchPreprocess) to [N, C, h, w]
    scores; `output` says whether they are "logits" (default; softmaxed) or "probabilities".
    Scores at another resolution are bilinearly upsampled. num_classes: None = probe once.
    """

    _spatial = True

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, C, H, W]."""
        return self._predict(images)


class OnnxClassifier(_OnnxAdapter):
    """An .onnx file mapping float [N, 3, H, W] to [N, C] scores, as a Classifier."""

    _spatial = False

    def predict_proba(self, images: np.ndarray | Sequence[np.ndarray]) -> np.ndarray:
        """uint8 [N, H, W, C] -> float32 [N, C]."""
        return self._predict(images)


