"""Model fingerprints: tell whether a model name in a scan folder still means the same model."""
from __future__ import annotations

import hashlib
import sys
from pathlib import Path
from typing import Any

from blindspots.models.spec_syntax import parse_spec

# Lazy imports: torch (the scan, its Ray workers and the GPU image's model loader start without them).


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def model_fingerprint(model: Any) -> str | None:
    """A content hash of a model, or None when it cannot be known (e.g. a plain callable).

    torch adapters: sha256 over the module's state_dict (names, shapes, bytes); file-based
    adapters (ONNX, TorchScript): sha256 of the file; precomputed folders: their absolute path.
    """
    module = getattr(model, "module", None)
    torch = sys.modules.get("torch")  # not imported: the model is no torch module (keeps the scan torch-free)
    if torch is not None and isinstance(module, torch.nn.Module):
        h = hashlib.sha256(type(module).__name__.encode())
        for name, t in module.state_dict().items():
            t = t.detach().cpu().contiguous().reshape(-1)
            h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
            h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        return "torch:" + h.hexdigest()
    path = getattr(model, "path", None)
    if isinstance(path, Path) and path.is_file():
        return "file:" + _file_digest(path)
    folder = getattr(model, "folder", None)
    if isinstance(folder, Path):
        return "folder:" + hashlib.sha256(str(folder.resolve()).encode()).hexdigest()
    return None


#: Spec options that do not change a model's maps (or that the fingerprint already covers).
_NEUTRAL_OPTIONS = ("batch_size", "device", "classes", "weights")


def model_settings(model: Any) -> str | None:
    """The spec options that change what a model predicts (size policy, normalisation, channel
    order, output mode, a function's keyword arguments), as one canonical string; None for a model
    built in Python without a spec. The fingerprint covers the weights only: without this, a
    re-run with `max_side=160` instead of 320 silently kept the old maps."""
    spec = (getattr(model, "info", None) or {}).get("spec")
    if not isinstance(spec, str):
        return None
    opts = parse_spec(spec)[1]
    if opts.get("precision") == "fp32":  # the default, written out: the same maps as without it
        del opts["precision"]
    return "&".join(f"{k}={opts[k]}" for k in sorted(opts) if k not in _NEUTRAL_OPTIONS)
