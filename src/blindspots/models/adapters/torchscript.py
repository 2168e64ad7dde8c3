"""TorchScript files (torch.jit.save) as Segmenters / Classifiers."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from blindspots.models.adapters.torch import TorchClassifier, TorchSegmenter
from blindspots.models.devices import resolve_device
from blindspots.models.protocol import short_reason


def load_torchscript(path: str | Path, device: str | torch.device = "cpu") -> torch.jit.ScriptModule:
    """Load a TorchScript file (torch.jit.save) onto `device`; ValueError if it is not one."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: expected an existing TorchScript file, got {str(path)!r}")
    try:
        with warnings.catch_warnings():  # torch 2.14's deprecation notice, printed on every command a user runs
            warnings.filterwarnings("ignore", message=r".*torch\.jit\.load.* is deprecated", category=FutureWarning)
            return torch.jit.load(str(path), map_location=resolve_device(device))
    except RuntimeError as e:  # torch raises RuntimeError for non-TorchScript archives
        raise ValueError(f"path: expected a TorchScript file (torch.jit.save), got {str(path)!r}: "
                         f"{short_reason(e)}") from None


def _no_hooks(layer: str) -> ValueError:
    # Scripted and traced modules inline their submodules: torch 2.14 refuses forward hooks on them.
    return ValueError(f"layer: TorchScript modules take no forward hooks (torch: 'register_forward_hook is not "
                      f"supported on ScriptModules'), so {layer!r} cannot be read; export the model to ONNX and "
                      "name an intermediate output, or give features from a callable or precomputed .npy files")


class _NoFeatureHooks:
    """Feature-map methods of the torch adapters, refused: no layer of a TorchScript module can be hooked."""

    def forward_features(self, chunk: Any, layer: str) -> Any:
        """Not available: TorchScript modules cannot be hooked (ValueError saying what to do instead)."""
        raise _no_hooks(layer)

    def default_feature_layer(self) -> str:
        """Not available (see `forward_features`)."""
        raise _no_hooks("the default feature layer")

    def check_feature_layer(self, layer: str) -> None:
        """Not available (see `forward_features`)."""
        raise _no_hooks(layer)


class TorchScriptSegmenter(_NoFeatureHooks, TorchSegmenter):
    """A TorchScript file (torch.jit.save) as a Segmenter.

    path: the .ts/.pt file; the scripted module maps float [N, 3, H, W] to [N, C, h, w] (or a
        dict with `output_key`). num_classes: C, or None to read it from one probe forward.
    Other arguments as TorchSegmenter (output="logits" by default, ImageNet preprocessing).
    """

    def __init__(self, path: str | Path, num_classes: int | None = None, **kwargs: Any) -> None:
        self.path = Path(path)
        module = load_torchscript(self.path, kwargs.get("device", "cpu"))
        super().__init__(module, num_classes, **kwargs)


class TorchScriptClassifier(_NoFeatureHooks, TorchClassifier):
    """A TorchScript file as a Classifier: float [N, 3, H, W] -> [N, C] logits (default)."""

    def __init__(self, path: str | Path, num_classes: int | None = None, **kwargs: Any) -> None:
        self.path = Path(path)
        module = load_torchscript(self.path, kwargs.get("device", "cpu"))
        super().__init__(module, num_classes, **kwargs)

