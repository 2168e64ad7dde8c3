"""Optional extras: the one place that imports a package an extra provides and, when it is missing, says in one
line which extra to install.

The core install (`pip install blindspots`) holds what the scan, mining, label issues, surprise and the loop need;
everything else comes with an extra (`pip install 'blindspots[app]'`, `[onnx]`, `[hf]`, `[zoo]`, `[video]`,
`[mri]`, `[microscopy]`, `[labelstudio]`, `[fiftyone]`, `[ray]`, `[s3]`, or `[all]`). Why one helper: every import site reports a
missing extra the same way, and the error is a ValueError, so the command line prints it as one line
`error: ...` (exit code 2) instead of a traceback.
"""
from __future__ import annotations

import importlib
from types import ModuleType

#: importable module (its top-level name) -> the extra that installs it
EXTRA_OF: dict[str, str] = {
    "fastapi": "app", "uvicorn": "app", "multipart": "app", "skimage": "app", "swagger_ui_bundle": "app",
    "onnx": "onnx", "onnxruntime": "onnx",
    "transformers": "hf",
    "segmentation_models_pytorch": "zoo", "torchvision": "zoo",
    "imageio": "video", "imageio_ffmpeg": "video",
    "nibabel": "mri",
    "tifffile": "microscopy",
    "label_studio_sdk": "labelstudio",
    "fiftyone": "fiftyone",
    "ray": "ray",
    "s3fs": "s3",
}


class MissingExtraError(ImportError, ValueError):
    """An optional package is not installed. A ValueError too, so the command line reports it as one line, and an
    ImportError, so code that already falls back on ImportError keeps doing so."""


def install_hint(extra: str) -> str:
    """The pip command that installs `extra`, e.g. `pip install 'blindspots[onnx]'`."""
    return f"pip install 'blindspots[{extra}]'"


def require(module: str, purpose: str) -> ModuleType:
    """Import `module` (dotted names allowed) or raise MissingExtraError naming the extra that provides it.

    purpose: what needs it, for the message ("an ONNX model", "the web app").
    """
    top = module.split(".")[0]
    if top not in EXTRA_OF:
        raise ValueError(f"module: expected one of the optional packages {sorted(EXTRA_OF)}, got {module!r}")
    try:
        return importlib.import_module(module)
    except ImportError as e:
        missing = getattr(e, "name", None) or top
        raise MissingExtraError(f"{purpose} needs the package {missing!r}, which is not installed: "
                                f"install the extra with {install_hint(EXTRA_OF[top])}", name=missing) from None
