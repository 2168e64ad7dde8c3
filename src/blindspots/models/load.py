"""`load_model(spec)`: turn a path or string into the right Segmenter adapter.

Spec forms (options may follow a "?" as a query string, e.g. `model.onnx?output=probabilities`):
- a folder                      -> PrecomputedSegmenter (one `<id>.npy` [C, H, W] per image id)
- `*.onnx`                      -> OnnxSegmenter (onnxruntime, CPU)
- `*.ts`, `*.torchscript`       -> TorchScriptSegmenter
- `*.pt`, `*.pth`               -> a TorchScript archive (has a `code/` entry) -> TorchScriptSegmenter;
                                   otherwise a zoo checkpoint -> `blindspots.models.zoo.load_segmenter`
- `package.module:function`     -> CallableSegmenter(function)
Options: output=logits|probabilities|labels, num_classes=C, batch_size=B, device=cpu|cuda.
"""
from __future__ import annotations

import importlib
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

from blindspots.models.adapters import CallableSegmenter, TorchScriptSegmenter

_OPTIONS = ("output", "num_classes", "batch_size", "device")


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """'path?output=logits&num_classes=5' -> ('path', {'output': 'logits', 'num_classes': 5})."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"spec: expected a model path or 'module:function', got {spec!r}")
    base, _, query = spec.partition("?")
    opts: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query)):
        if key not in _OPTIONS:
            raise ValueError(f"spec: expected options among {_OPTIONS}, got {key!r} in {spec!r}")
        if key in ("num_classes", "batch_size"):
            if not value.isdigit() or int(value) < 1:
                raise ValueError(f"spec: expected {key} to be a positive integer, got {value!r} in {spec!r}")
            opts[key] = int(value)
        else:
            opts[key] = value
    return base, opts


def is_torchscript_archive(path: Path) -> bool:
    """True for a torch.jit.save zip archive (it has `<name>/code/` entries; torch.save files do not)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any("/code/" in n for n in z.namelist())


def load_model(spec: str, **overrides: Any) -> Any:
    """A Segmenter for `spec` (see the module docstring); keyword overrides beat spec options."""
    base, opts = parse_spec(spec)
    opts.update({k: v for k, v in overrides.items() if v is not None})
    path = Path(base)
    if path.is_dir():
        from blindspots.models.precomputed import PrecomputedSegmenter
        return PrecomputedSegmenter(path, opts.get("num_classes"), output=opts.get("output", "probabilities"))
    suffix = path.suffix.lower()
    if path.is_file() and suffix == ".onnx":
        from blindspots.models.onnx import OnnxSegmenter
        return OnnxSegmenter(path, opts.get("num_classes"), output=opts.get("output", "logits"),
                             batch_size=opts.get("batch_size", 16))
    if path.is_file() and suffix in (".ts", ".torchscript", ".pt", ".pth"):
        torch_opts = {k: opts[k] for k in ("output", "batch_size", "device") if k in opts}
        if suffix in (".ts", ".torchscript") or is_torchscript_archive(path):
            return TorchScriptSegmenter(path, opts.get("num_classes"), **torch_opts)
        try:
            from blindspots.models.zoo import load_segmenter
        except ImportError:
            raise ValueError(f"spec: {base!r} is not TorchScript and the zoo (blindspots.models.zoo) "
                             "is not available to load it as a checkpoint") from None
        return load_segmenter(path, batch_size=opts.get("batch_size", 16), device=opts.get("device", "cpu"))
    if path.exists():
        raise ValueError(f"spec: expected a folder of .npy, an .onnx, .ts/.torchscript or .pt/.pth file, got {base!r}")
    if ":" in base:
        module_name, _, attr = base.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(f"spec: expected an importable 'module:function', got {base!r} ({e})") from None
        return CallableSegmenter(fn, opts.get("num_classes"), output=opts.get("output", "probabilities"),
                                 batch_size=opts.get("batch_size"))
    raise ValueError(f"spec: expected an existing path or 'module:function', got {base!r} (no such file)")
