"""Torch nn.Modules (or any tensor -> tensor callable) as Segmenters / Classifiers.

The module maps float [N, 3, H, W] (see `TorchPreprocess`: x / 255, then ImageNet mean/std)
to logits [N, C, h, w] (segmenter; any h, w: upsampled bilinearly) or [N, C] (classifier),
or a dict (torchvision's "out") / tuple / transformers output holding that tensor.
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np
import torch

from blindspots.data.classes import Classes
from blindspots.models.adapters.base import BaseAdapter
from blindspots.models.adapters.inputs import InputPolicy, TorchPreprocess
from blindspots.models.adapters.outputs import select_output
from blindspots.models.devices import autocast, check_precision, resolve_device
from blindspots.models.protocol import as_image_batch


class _TorchAdapter(BaseAdapter):
    """Shared batching / eval / no-grad logic for torch modules.

    num_classes: C, or None to read it from one forward on a blank image (a one-channel
        output is a binary model, C = 2). output: "logits" (default) or "probabilities".
    output_key: the dict key of the output (default "out"). preprocess: uint8 -> float tensor.
    device: "cpu" (default), "cuda", "cuda:N" or "auto" (CUDA when present, else CPU; what a spec
        without `device` gets). precision: "fp32" (default), "fp16" or "bf16": the forward runs under
        torch.autocast and its output is cast back to float32, so probabilities stay float32
        (`blindspots.models.devices`).
    policy: the input policy (native by default). classes: class names (default class_0..).
    info: where the model came from (kind, spec, arch, meta, ...).
    """

    def __init__(
        self,
        module: torch.nn.Module | Callable[[torch.Tensor], Any],
        num_classes: int | None = None,
        *,
        output: str = "logits",
        output_key: str | None = None,
        preprocess: Callable[..., torch.Tensor] | None = None,
        batch_size: int = 16,
        device: str | torch.device = "cpu",
        precision: str = "fp32",
        policy: InputPolicy | None = None,
        classes: Classes | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        if not callable(module):  # None or a path would otherwise fail only at the first forward
            raise ValueError(f"module: expected a torch.nn.Module or a callable f(float tensor [N, 3, H, W]) -> "
                             f"output, got {type(module).__name__}")
        self._setup(output=output, batch_size=batch_size, policy=policy, info=info)
        self.module = module
        self.output_key = output_key
        self.preprocess = preprocess or TorchPreprocess()
        self.device = resolve_device(device)
        self.precision = check_precision(precision)
        if isinstance(module, torch.nn.Module):
            module.to(self.device).eval()
        self._set_classes(num_classes, classes)

    @torch.no_grad()
    def forward_tensor(self, batch: np.ndarray) -> torch.Tensor:
        """Raw selected model output for one uint8 [n, H, W, C] chunk (no policy, no validation)."""
        x = self.preprocess(batch, self.device)
        with autocast(self.device, self.precision):
            y = select_output(self.module(x), self.output_key)
        # autocast's half-precision output back to float32: softmax, entropies, statistics in float32
        return y.float() if y.is_floating_point() and y.dtype != torch.float32 else y

    def _raw(self, chunk: np.ndarray) -> torch.Tensor:
        return self.forward_tensor(chunk)

    def _layer_target(self, layer: str) -> tuple[torch.nn.Module, bool]:
        """(module, take its input?) of a layer name `name`, `name@input` or `name@output`."""
        if not isinstance(self.module, torch.nn.Module):
            raise ValueError(f"layer: expected a model wrapping a torch nn.Module to hook {layer!r}, "
                             f"got {type(self.module).__name__}")
        cache: dict[tuple[int, str], tuple[torch.nn.Module, bool]] = self.__dict__.setdefault("_layer_targets", {})
        key = (id(self.module), layer)  # resolved once per module and layer: named_modules() walks the whole model
        if key in cache:
            return cache[key]
        name, _, where = layer.partition("@")
        modules = dict(self.module.named_modules())
        if name not in modules:
            sample = [n for n in modules if n][:12]
            raise ValueError(f"layer: expected a module name of the model such as {sample}, got {name!r}")
        if where not in ("", "input", "output"):
            raise ValueError(f"layer: expected 'name', 'name@input' or 'name@output', got {layer!r}")
        cache[key] = (modules[name], where == "input")
        return cache[key]

    def check_feature_layer(self, layer: str) -> None:
        """ValueError naming `layer` unless it names a module (`name`, `name@input`, `name@output`)."""
        self._layer_target(layer)

    def default_feature_layer(self) -> str:
        """`name@input` of the last executed classifier layer (C outputs, not an auxiliary head): the
        deepest feature layer of the surprise paper."""
        if not isinstance(self.module, torch.nn.Module):
            raise ValueError("layer: expected a layer name for a model without torch modules, got None")
        heads = self._heads(self.num_classes)
        if not heads and self.num_classes == 2:
            heads = self._heads(1)  # a binary model with a one-channel head
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
            self.forward_tensor(np.zeros((1, 64, 64, 3), dtype=np.uint8))
        finally:
            for h in hooks:
                h.remove()
        return f"{(order[-1] if order else heads[-1][0])}@input"

    def _heads(self, c: int) -> list[tuple[str, torch.nn.Module]]:
        """Conv2d / Linear layers with c outputs, auxiliary heads excluded."""
        return [(n, m) for n, m in self.module.named_modules()
                if "aux" not in n.lower() and (
                    (isinstance(m, torch.nn.Conv2d) and m.out_channels == c)
                    or (isinstance(m, torch.nn.Linear) and m.out_features == c))]

    @torch.no_grad()
    def forward_features(self, chunk: np.ndarray, layer: str) -> tuple[torch.Tensor, torch.Tensor]:
        """One forward of uint8 [n, H, W, C] (no policy): (the layer's output, or input for `name@input`,
        float32 as it comes: [n, D, h, w] or [n, D]; the raw selected model output float32 [n, C, h', w'])."""
        target, use_input = self._layer_target(layer)
        store: list[Any] = []

        def grab(val: Any) -> None:
            store.append(val[0] if isinstance(val, (tuple, list)) else val)

        hook = (target.register_forward_pre_hook(lambda _m, i: grab(i)) if use_input
                else target.register_forward_hook(lambda _m, _i, o: grab(o)))
        try:
            x = self.preprocess(chunk, self.device)
            with autocast(self.device, self.precision):
                y = select_output(self.module(x), self.output_key).float()
        finally:
            hook.remove()
        if not store or not isinstance(store[-1], torch.Tensor):
            raise ValueError(f"layer: {layer!r} did not produce a tensor during the forward pass")
        return store[-1].detach().float(), y

    def features(self, images: np.ndarray | Sequence[np.ndarray], layer: str | None = None) -> np.ndarray:
        """uint8 [N, H, W, 3] -> float32 [N, D, h, w] (or [N, D]) of `layer` (None: the default feature layer)."""
        batch = as_image_batch(images)
        layer = layer or self.default_feature_layer()
        step = self.batch_size or len(batch)
        return np.concatenate([self.forward_features(batch[s:s + step], layer)[0].cpu().numpy()
                               for s in range(0, len(batch), step)])


class TorchSegmenter(_TorchAdapter):
    """A torch nn.Module (or any tensor -> tensor/dict callable) as a Segmenter.

    module: maps float [N, 3, H, W] to [N, C, h, w] logits (or a dict with `output_key`, e.g.
        torchvision's "out"); outputs at another resolution are bilinearly upsampled.
    output: "logits" (default; softmaxed) or "probabilities" (validated as is).
    """

    _spatial = True


class TorchClassifier(_TorchAdapter):
    """A torch nn.Module as a Classifier: [N, C] logits (default) or probabilities."""

    _spatial = False
