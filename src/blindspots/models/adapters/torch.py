"""Torch nn.Modules (or any tensor -> tensor callable) as Segmenters / Classifiers.

The module maps float [N, 3, H, W] (see `TorchPreprocess`: x / 255, then ImageNet mean/std)
to logits [N, C, h, w] (segmenter; any h, w: upsampled bilinearly) or [N, C] (classifier),
or a dict (torchvision's "out") / tuple / transformers output holding that tensor.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from blindspots.data.classes import Classes
from blindspots.models.adapters.base import BaseAdapter
from blindspots.models.adapters.inputs import InputPolicy, TorchPreprocess
from blindspots.models.adapters.outputs import select_output


class _TorchAdapter(BaseAdapter):
    """Shared batching / eval / no-grad logic for torch modules.

    num_classes: C, or None to read it from one forward on a blank image (a one-channel
        output is a binary model, C = 2). output: "logits" (default) or "probabilities".
    output_key: the dict key of the output (default "out"). preprocess: uint8 -> float tensor.
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
        policy: InputPolicy | None = None,
        classes: Classes | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        self._setup(output=output, batch_size=batch_size, policy=policy, info=info)
        self.module = module
        self.output_key = output_key
        self.preprocess = preprocess or TorchPreprocess()
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise ValueError(f"device: expected a torch device such as 'cpu' or 'cuda', got {device!r} ({e})") \
                from None
        if isinstance(module, torch.nn.Module):
            module.to(self.device).eval()
        self._set_classes(num_classes, classes)

    @torch.no_grad()
    def forward_tensor(self, batch: np.ndarray) -> torch.Tensor:
        """Raw selected model output for one uint8 [n, H, W, C] chunk (no policy, no validation)."""
        x = self.preprocess(batch, self.device)
        return select_output(self.module(x), self.output_key)

    def _raw(self, chunk: np.ndarray) -> torch.Tensor:
        return self.forward_tensor(chunk)


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
