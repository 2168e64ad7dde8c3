"""The project's models: spec strings, loading through `blindspots.models.load`, the init probe,
and whether the loop can fine-tune the target.

A project stores each model as the same spec string the scan takes (`blindspots.models.load`):
a zoo checkpoint, a TorchScript or ONNX file, a folder of precomputed `.npy`, or
`package.module:function`, with options after "?". The loop never special-cases a kind to load
it; only fine-tuning needs to know whether the target is a zoo checkpoint it can train.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Iterable

import numpy as np

__all__ = ["split_spec", "is_path_spec", "absolute_spec", "spec_path", "load_spec", "predict_one", "probe_models",
           "spec_kind", "finetune_blocker", "TRAINABLE_KINDS"]


def split_spec(spec: str) -> tuple[str, str]:
    """'model.onnx?output=logits' -> ('model.onnx', '?output=logits'); the query is '' without options."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"spec: expected a model path or 'module:function', got {spec!r}")
    base, sep, query = spec.partition("?")
    return base, sep + query


def is_path_spec(spec: str, base_dir: str | Path = ".") -> bool:
    """True unless `spec` names a `module:function` callable (a ':' and no such file or folder)."""
    base, _ = split_spec(spec)
    if ":" not in base:
        return True
    p = Path(base).expanduser()
    # A Windows drive ("C:\\m.onnx") or an existing path with a colon is still a path.
    return p.exists() or (Path(base_dir) / p).exists() or (len(base) > 1 and base[1] == ":")


def absolute_spec(spec: str, base_dir: str | Path) -> str:
    """The spec with a relative path made absolute against `base_dir` (callables unchanged)."""
    try:  # the models package's version also makes classes=/weights= paths absolute (issue 13)
        from blindspots.models.load import absolute_spec as models_absolute_spec
    except ImportError:
        models_absolute_spec = None
    if models_absolute_spec is not None:
        return models_absolute_spec(spec, base_dir)
    if not is_path_spec(spec, base_dir):
        return spec
    base, query = split_spec(spec)
    p = Path(base).expanduser()
    return str(p if p.is_absolute() else (Path(base_dir) / p).resolve()) + query


def spec_path(spec: str) -> Path | None:
    """The file or folder a path spec names (None for a callable)."""
    return Path(split_spec(spec)[0]) if is_path_spec(spec) else None


def use_import_dir(spec: str, import_dir: str | None) -> None:
    """Let a `module:function` spec import from `import_dir` (the folder `init` ran in)."""
    if import_dir and not is_path_spec(spec) and import_dir not in sys.path:
        sys.path.insert(0, import_dir)


def load_spec(spec: str, *, import_dir: str | None = None, device: str | None = None) -> Any:
    """A Segmenter for `spec` through `blindspots.models.load.load_model`.

    import_dir: the folder `init` ran in; a `module:function` spec imports from it (the user's
    own package need not be installed or on PYTHONPATH when `round` runs elsewhere).
    device: torch device for torch kinds (the project's `finetune.device`), None: the spec's own.
    """
    from blindspots.models.load import load_model

    use_import_dir(spec, import_dir)
    overrides = {}
    base, _ = split_spec(spec)
    if device is not None and Path(base).suffix.lower() in (".pt", ".pth", ".ts", ".torchscript"):
        overrides["device"] = device
    return load_model(spec, **overrides)


def predict_one(seg: Any, image_id: str, image: np.ndarray) -> np.ndarray:
    """float [1, C, H, W] for one pool image: by id for models keyed by id (precomputed
    outputs have `predict_proba_ids`), by pixels otherwise. image: uint8 [H, W, 3]."""
    if hasattr(seg, "predict_proba_ids"):
        return np.asarray(seg.predict_proba_ids([image_id], sizes=[image.shape[:2]]))
    return np.asarray(seg.predict_proba(image[None]))


def probe_models(models: dict[str, Any], image: np.ndarray, image_id: str) -> int:
    """Run one pool image through every model; returns C. ValueError in one line naming the model.

    models: name -> Segmenter; image: uint8 [H, W, 3]. Each model must give finite probabilities
    float [1, C, H, W] at the image's size, with the same C for every model.
    """
    try:  # the models package's probe (issue 13) checks more (dtype, sums, class names)
        from blindspots.models.probe import probe_model
    except ImportError:
        probe_model = None
    sizes: dict[str, int] = {}
    h, w = image.shape[:2]
    for name, seg in models.items():
        if probe_model is not None:
            probe_model(seg, image, f"models.{name}", image_id=image_id)
            sizes[name] = int(seg.num_classes)
            continue
        try:
            proba = predict_one(seg, image_id, image)
        except Exception as e:  # noqa: BLE001 - any failure of the user's model is reported the same way
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ValueError(f"models.{name}: expected a model that runs on pool image {image_id!r}, "
                             f"got {type(e).__name__}: {msg}") from None
        c = int(getattr(seg, "num_classes", proba.shape[1] if proba.ndim == 4 else 0))
        if proba.shape != (1, c, h, w):
            raise ValueError(f"models.{name}: expected probabilities of shape {(1, c, h, w)} for pool image "
                             f"{image_id!r}, got {proba.shape}")
        if not np.isfinite(proba).all():
            raise ValueError(f"models.{name}: expected finite probabilities for pool image {image_id!r}, "
                             "got NaN or infinity")
        sizes[name] = c
    if len(set(sizes.values())) > 1:
        raise ValueError(f"models: expected one label space (the same number of classes), got {sizes}")
    return next(iter(sizes.values()))


#: Spec kinds the loop can fine-tune (`blindspots.finetune.segmentation` on a zoo checkpoint).
#: TODO(issue 13): "factory" and "hf" once the fine-tuner takes any torch module.
TRAINABLE_KINDS = ("zoo",)
KIND_NAMES = {"zoo": "a zoo checkpoint", "torchscript": "a TorchScript model", "onnx": "an ONNX model",
              "precomputed": "a folder of precomputed outputs", "hf": "a Hugging Face model folder",
              "callable": "a Python callable", "factory": "a module:factory torch model"}


def spec_kind(spec: str) -> str:
    """The kind of a spec (a key of KIND_NAMES) without loading weights: the models package's
    `spec_kind` when it has one, else from the path alone."""
    try:
        from blindspots.models.load import spec_kind as models_spec_kind
    except ImportError:
        models_spec_kind = None
    if models_spec_kind is not None:
        return models_spec_kind(spec)
    if not is_path_spec(spec):
        return "callable"
    p = Path(split_spec(spec)[0])
    if p.is_dir():
        return "hf" if (p / "config.json").is_file() else "precomputed"
    suffix = p.suffix.lower()
    if suffix == ".onnx":
        return "onnx"
    if suffix in (".pt", ".pth"):
        from blindspots.models.load import is_torchscript_archive

        return "torchscript" if p.is_file() and is_torchscript_archive(p) else "zoo"
    return "torchscript"


def finetune_blocker(spec: str, target: str, data: Iterable[str], *, import_dir: str | None = None) -> str | None:
    """Why the loop cannot fine-tune the target (one sentence), or None when it can.

    It can with a zoo checkpoint and both S0 and T0 (`data`: the [data] train and val values).
    import_dir: where a `module:function` spec imports from (see `load_spec`).
    """
    use_import_dir(spec, import_dir)
    kind = spec_kind(spec)
    if kind not in TRAINABLE_KINDS:
        return (f"the target {target!r} is {KIND_NAMES.get(kind, kind)}, which blindspots cannot fine-tune: "
                "label S, retrain it in "
                "your own stack, then register the new model with `blindspots register PROJECT SPEC` as the "
                "next version and run `blindspots round` again")
    if not all(data):
        return ("the project has no training data (--train-data and --val-data) to fine-tune with: label S, "
                "retrain the target in your own stack, then register the new model with `blindspots register "
                "PROJECT SPEC` as the next version and run `blindspots round` again")
    return None
