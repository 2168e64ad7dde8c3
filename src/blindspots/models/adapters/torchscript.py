"""TorchScript files (torch.jit.save) as Segmenters / Classifiers."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from blindspots.models.adapters.torch import TorchClassifier, TorchSegmenter
from blindspots.models.protocol import short_reason


def load_torchscript(path: str | Path, device: str | torch.device = "cpu") -> torch.jit.ScriptModule:
    """Load a TorchScript file (torch.jit.save) onto `device`; ValueError if it is not one."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: expected an existing TorchScript file, got {str(path)!r}")
    try:
        return torch.jit.load(str(path), map_location=torch.device(device))
    except RuntimeError as e:  # torch raises RuntimeError for non-TorchScript archives
        raise ValueError(f"path: expected a TorchScript file (torch.jit.save), got {str(path)!r}: "
                         f"{short_reason(e)}") from None


class TorchScriptSegmenter(TorchSegmenter):
    """A TorchScript file (torch.jit.save) as a Segmenter.

    path: the .ts/.pt file; the scripted module maps float [N, 3, H, W] to [N, C, h, w] (or a
        dict with `output_key`). num_classes: C, or None to read it from one probe forward.
    Other arguments as TorchSegmenter (output="logits" by default, ImageNet preprocessing).
    """

    def __init__(self, path: str | Path, num_classes: int | None = None, **kwargs: Any) -> None:
        self.path = Path(path)
        module = load_torchscript(self.path, kwargs.get("device", "cpu"))
        super().__init__(module, num_classes, **kwargs)


class TorchScriptClassifier(TorchClassifier):
    """A TorchScript file as a Classifier: float [N, 3, H, W] -> [N, C] logits (default)."""

    def __init__(self, path: str | Path, num_classes: int | None = None, **kwargs: Any) -> None:
        self.path = Path(path)
        module = load_torchscript(self.path, kwargs.get("device", "cpu"))
        super().__init__(module, num_classes, **kwargs)
