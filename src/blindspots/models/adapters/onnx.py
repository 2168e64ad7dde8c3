"""ONNX models: export a torch module to an .onnx file and run one with onnxruntime.

`device` picks ONNX Runtime's execution provider (`providers`): "auto" (what a spec without
`device` gets) uses the CUDA provider when onnxruntime has it (the onnxruntime-gpu build) and torch
sees a GPU, else the CPU provider; "cuda" requires it; "cpu" (the Python default) never uses it.

`OnnxSegmenter` / `OnnxClassifier` follow the Segmenter / Classifier protocols
(`blindspots.models.protocol`): uint8 [N, H, W, 3] in, float32 probabilities out. A graph with a
fixed input size gets `resize` to that size unless another input policy is given; an
onnxruntime failure becomes a one-line ValueError naming the model and the input shape.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from blindspots.data.classes import Classes
from blindspots.extras import require
from blindspots.models.adapters.base import BaseAdapter
from blindspots.models.adapters.inputs import IMAGENET_MEAN, IMAGENET_STD, UNIT_SCALE, InputPolicy, TorchPreprocess
from blindspots.models.protocol import ModelFailure, as_image_batch, short_reason

# Lazy imports: onnx, onnxruntime (optional: only the call that uses them needs them).


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


CUDA_PROVIDER = "CUDAExecutionProvider"
CPU_PROVIDER = "CPUExecutionProvider"


def providers(device: str, available: Sequence[str]) -> list[Any]:
    """ONNX Runtime's execution providers for `device` ("auto", "cpu", "cuda", "cuda:N"), given the
    providers this onnxruntime build has. The CUDA provider comes first with the CPU provider behind
    it (ONNX Runtime runs there the nodes CUDA has no kernel for)."""
    text = str(device).strip().lower()
    kind, _, index = text.partition(":")
    if kind not in ("auto", "cpu", "cuda") or (index and (kind != "cuda" or not index.isdigit())):
        raise ValueError(f"device: expected 'auto', 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    has_cuda = CUDA_PROVIDER in available
    if kind == "cuda" and not has_cuda:
        raise ValueError(f"device: expected an onnxruntime with the {CUDA_PROVIDER} for {device!r} "
                         f"(pip install onnxruntime-gpu), got providers {list(available)}")
    # auto: the CUDA provider only where a GPU is present too (onnxruntime-gpu lists it on any machine)
    if kind == "cuda" or (kind == "auto" and has_cuda and torch.cuda.is_available()):
        return [(CUDA_PROVIDER, {"device_id": int(index or 0)}), CPU_PROVIDER]
    return [CPU_PROVIDER]


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


class _OnnxAdapter(BaseAdapter):
    """Shared onnxruntime session, preprocessing and batching."""

    _name = "ONNX output"

    def __init__(
        self,
        path: str | Path,
        num_classes: int | None = None,
        *,
        output: str = "logits",
        mean: Sequence[float] = IMAGENET_MEAN,
        std: Sequence[float] = IMAGENET_STD,
        scale: float = UNIT_SCALE,
        batch_size: int = 16,
        input_name: str | None = None,
        output_name: str | None = None,
        intra_op_threads: int = 0,
        device: str = "cpu",
        policy: InputPolicy | None = None,
        classes: Classes | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        ort = require("onnxruntime", "an ONNX model")  # imported here: only ONNX users pay for it

        self._setup(output=output, batch_size=batch_size, policy=policy, info=info)
        self.path = Path(path)
        if not self.path.is_file():
            raise ValueError(f"path: expected an existing .onnx file, got {str(self.path)!r}")
        self.preprocess = TorchPreprocess(mean, std, scale)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(intra_op_threads)  # 0 = onnxruntime's default
        opts.log_severity_level = 4  # fatal only: a failed run is reported by the ValueError below
        # onnxruntime's CPU arena keeps each session's largest run for good: two detectors on photos
        # held ~400 MB between batches. Without it the scan of the README's 176 photos peaked at
        # 1.87 GB instead of 2.17 GB (1 MP batches, glibc defaults), in about the same time.
        opts.enable_cpu_mem_arena = False
        self.providers = providers(device, ort.get_available_providers())
        try:
            self.session = ort.InferenceSession(str(self.path), opts, providers=self.providers)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            raise ValueError(f"path: expected a valid ONNX model, got {str(self.path)!r}: {short_reason(e)}") from None
        inputs = {i.name: i for i in self.session.get_inputs()}
        outputs = [o.name for o in self.session.get_outputs()]
        self.input_name = input_name or next(iter(inputs))
        if self.input_name not in inputs:
            raise ValueError(f"input_name: expected one of {sorted(inputs)}, got {input_name!r}")
        self.output_name = output_name or outputs[0]
        if self.output_name not in outputs:
            raise ValueError(f"output_name: expected one of {outputs}, got {output_name!r}")
        # float16 graphs take float16 inputs; everything else gets float32
        self._input_dtype = np.float16 if inputs[self.input_name].type == "tensor(float16)" else np.float32
        shape = inputs[self.input_name].shape
        fixed = shape[0] if shape else None
        # A model exported with a fixed batch axis is fed chunks of exactly that size (last one padded).
        self.fixed_batch = fixed if isinstance(fixed, int) and fixed > 0 else None
        self.batch_size = self.fixed_batch or self.batch_size
        hw = tuple(shape[2:4]) if len(shape) == 4 else ()
        self._channels = shape[1] if len(shape) == 4 and isinstance(shape[1], int) and shape[1] > 0 else None
        fixed_hw = len(hw) == 2 and all(isinstance(v, int) and v > 0 for v in hw)
        self._fixed_hw = (int(hw[0]), int(hw[1])) if fixed_hw else None
        if policy is None and self._spatial and fixed_hw:
            self.policy = InputPolicy(resize=(int(hw[0]), int(hw[1])))  # the graph takes one size only
        self._set_classes(num_classes, classes)

    @property
    def mean(self) -> np.ndarray:
        return np.asarray(self.preprocess.mean, dtype=np.float32).reshape(1, -1, 1, 1)

    @property
    def std(self) -> np.ndarray:
        return np.asarray(self.preprocess.std, dtype=np.float32).reshape(1, -1, 1, 1)

    def _forward(self, chunk: np.ndarray) -> np.ndarray:
        """uint8 [n, H, W, C] -> raw model output (no validation)."""
        n = len(chunk)
        x = self.preprocess.numpy(chunk)
        if self.fixed_batch and n < self.fixed_batch:
            x = np.concatenate([x, np.repeat(x[-1:], self.fixed_batch - n, axis=0)])
        try:
            feed = np.ascontiguousarray(x, dtype=self._input_dtype)
            out = self.session.run([self.output_name], {self.input_name: feed})[0]
        except Exception as e:  # noqa: BLE001 - onnxruntime's own types; one line naming the input
            hint = " (if it needs a fixed size or multiples of N, add ?resize=HxW or ?pad=N)" if self._spatial else ""
            if self._spatial and self._fixed_hw is not None and tuple(x.shape[2:4]) != self._fixed_hw:
                h, w = self._fixed_hw
                hint = (f" (the graph takes {h}x{w} images only: leave out the size options, which resize to it, "
                        f"or use ?resize={h}x{w})")
            if self._channels is not None and x.ndim == 4 and x.shape[1] != self._channels:
                hint = (f" (the graph takes {self._channels} channels, the images have {x.shape[1]}: "
                        + ("grey images [N, H, W]: stack them to RGB" if x.shape[1] == 1 else "check the image batch")
                        + ")")
            raise ModelFailure(f"ONNX model {self.path.name!r} failed on input of shape {list(x.shape)}{hint}: "
                             f"{short_reason(e, 160)}") from None
        return out[:n]

    def _raw(self, chunk: np.ndarray) -> np.ndarray:
        return self._forward(chunk)

    def _feature_session(self, layer: str) -> Any:
        """An onnxruntime session whose outputs include the intermediate tensor `layer` (cached per layer).

        A tensor that is already a graph output is read from the main session; any other tensor named by
        a node output is added as an extra graph output (onnx.helper), the graph otherwise unchanged."""
        if layer in [o.name for o in self.session.get_outputs()]:
            return self.session
        cache: dict[str, Any] = self.__dict__.setdefault("_feature_sessions", {})
        if layer in cache:
            return cache[layer]
        onnx = require("onnx", "an ONNX model's intermediate outputs")
        ort = require("onnxruntime", "an ONNX model")

        model = onnx.load(str(self.path))
        produced = [o for node in model.graph.node for o in node.output if o]
        if layer not in produced:
            sample = [o for o in produced if not o.startswith("onnx::")][-12:]
            raise ValueError(f"layer: expected the name of a tensor in {self.path.name!r} such as {sample}, "
                             f"got {layer!r}")
        model.graph.output.append(onnx.helper.make_tensor_value_info(layer, onnx.TensorProto.FLOAT, None))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = self.session.get_session_options().intra_op_num_threads
        opts.log_severity_level = 4
        cache[layer] = ort.InferenceSession(model.SerializeToString(), opts, providers=self.providers)
        return cache[layer]

    def forward_features(self, chunk: np.ndarray, layer: str) -> tuple[torch.Tensor, torch.Tensor]:
        """One run of uint8 [n, H, W, C] (no policy): (the intermediate tensor `layer` float32 as it
        comes, e.g. [n, D, h, w]; the raw scores output float32 [n, C, h', w'])."""
        n = len(chunk)
        x = self.preprocess.numpy(chunk)
        if self.fixed_batch and n < self.fixed_batch:
            x = np.concatenate([x, np.repeat(x[-1:], self.fixed_batch - n, axis=0)])
        session = self._feature_session(layer)
        try:
            feed = np.ascontiguousarray(x, dtype=self._input_dtype)
            feat, out = session.run([layer, self.output_name], {self.input_name: feed})
        except Exception as e:  # noqa: BLE001 - onnxruntime's own types; one line naming the input
            raise ModelFailure(f"ONNX model {self.path.name!r} failed on input of shape {list(x.shape)} reading "
                               f"{layer!r}: {short_reason(e, 160)}") from None
        return (torch.from_numpy(np.asarray(feat[:n], dtype=np.float32)),
                torch.from_numpy(np.asarray(out[:n], dtype=np.float32)))

    def features(self, images: np.ndarray | Sequence[np.ndarray], layer: str | None = None) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, D, h, w] (or [N, D]) of the graph tensor `layer` (required)."""
        if not layer:
            self.default_feature_layer()  # raises, naming tensors of this graph
        batch = as_image_batch(images)
        step = self.batch_size or len(batch)
        return np.concatenate([self.forward_features(batch[s:s + step], layer)[0].numpy()
                               for s in range(0, len(batch), step)])

    def check_feature_layer(self, layer: str) -> None:
        """ValueError naming `layer` unless the graph has a tensor of that name."""
        self._feature_session(layer)

    def tensor_names(self) -> list[str]:
        """Names of the tensors the graph's nodes produce (inputs of `layer=`), in graph order,
        without exporter-generated `onnx::` names."""
        import onnx

        model = onnx.load(str(self.path))
        return [o for node in model.graph.node for o in node.output if o and not o.startswith("onnx::")]

    def default_feature_layer(self) -> str:
        """ONNX graphs have no module tree to find the classifier in: the layer must be named."""
        names = self.tensor_names()
        raise ValueError(f"layer: expected the name of an intermediate tensor of {self.path.name!r} (--layer), "
                         f"got None; its last ones: {names[-8:]} (all: onnx.load(path).graph.node outputs)")


class OnnxSegmenter(_OnnxAdapter):
    """An .onnx file run with onnxruntime (CPU, or CUDA with `device`) as a Segmenter.

    The graph maps float [N, 3, H, W] (ImageNet-normalised, as TorchPreprocess) to [N, C, h, w]
    scores; `output` says whether they are "logits" (default; softmaxed) or "probabilities".
    Scores at another resolution are bilinearly upsampled. num_classes: None = probe once.
    A one-channel output is a binary model (sigmoid for logits).
    """

    _spatial = True


class OnnxClassifier(_OnnxAdapter):
    """An .onnx file mapping float [N, 3, H, W] to [N, C] scores, as a Classifier."""

    _spatial = False
