"""The project's models: spec strings, loading through `blindspots.models.load`, the init probe,
and whether the loop can fine-tune the target.

A project stores each model as the same spec string the scan takes (`blindspots.models.load`):
a zoo checkpoint, a TorchScript or ONNX file, a folder of precomputed `.npy`, or
`package.module:function`, with options after "?". The loop never special-cases a kind to load
it; only fine-tuning needs to know whether the target is a torch module it can train (zoo, factory, HF).
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, Iterable

import numpy as np

from blindspots.models.probe import probe_model
from blindspots.models.protocol import predict_segmenter
from blindspots.models.spec_syntax import KIND_NAMES, is_module_spec, spec_kind
from blindspots.models.spec_syntax import absolute_spec as models_absolute_spec

# Lazy imports: torch, through `blindspots.models.load` (its adapters); the store, `status` and `export` read specs
# without it.

__all__ = ["split_spec", "is_path_spec", "absolute_spec", "spec_path", "load_spec", "predict_one", "probe_models",
           "finetune_blocker", "LOOP_TRAINABLE_KINDS"]

log = logging.getLogger(__name__)

def split_spec(spec: str) -> tuple[str, str]:
    """'model.onnx?output=logits' -> ('model.onnx', '?output=logits'); the query is '' without options."""
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"spec: expected a model path or 'module:function', got {spec!r}")
    base, sep, query = spec.partition("?")
    return base, sep + query


def is_path_spec(spec: str, base_dir: str | Path = ".") -> bool:
    """True unless `spec` names a `package.module:function` callable (the one rule of
    `blindspots.models.spec_syntax`, which `load_model` follows too)."""
    return not is_module_spec(split_spec(spec)[0], base_dir)


def absolute_spec(spec: str, base_dir: str | Path) -> str:
    """The spec with its relative paths (model, classes=, weights=) made absolute against `base_dir`
    (`blindspots.models.spec_syntax.absolute_spec`; a `module:function` stays as is)."""
    return models_absolute_spec(spec, base_dir)


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
    return load_model(spec, device=device)  # device is ignored by kinds it does not apply to


def predict_one(seg: Any, image_id: str, image: np.ndarray) -> np.ndarray:
    """float [1, C, H, W] for one pool image: by id for models keyed by id (precomputed
    outputs), by pixels otherwise. image: uint8 [H, W, 3]."""
    return np.asarray(predict_segmenter(seg, image[None], [image_id]))


def probe_models(models: dict[str, Any], image: np.ndarray, image_id: str) -> int:
    """Run one pool image through every model (`blindspots.models.probe_model`); returns C.

    models: name -> Segmenter; image: uint8 [H, W, 3]. ValueError in one line naming the model if
    one fails on the image or gives invalid probabilities, or if the models' C differ.
    """
    sizes: dict[str, int] = {}
    for name, seg in models.items():
        probe_model(seg, image, f"models.{name}", image_id=image_id)
        sizes[name] = int(seg.num_classes)
    if len(set(sizes.values())) > 1:
        raise ValueError(f"models: expected one label space (the same number of classes), got {sizes}")
    c = next(iter(sizes.values()))
    # Class k of every model is compared with class k of the target: models that name their
    # classes differently (a text detector against a vegetation detector) are most likely a mistake.
    generic = tuple(f"class_{k}" for k in range(c))
    named = {n: tuple(getattr(getattr(m, "classes", None), "names", generic)) for n, m in models.items()}
    named = {n: v for n, v in named.items() if v != generic}
    if len(set(named.values())) > 1:
        log.warning("models: class k of every model is compared with class k of the target, but they name "
                    "their classes differently: %s; give one classes file (?classes=FILE) to all if they agree",
                    "; ".join(f"{n}: {list(v)}" for n, v in named.items()))
    return c


#: Spec kinds the loop fine-tunes (`FinetuneStep`): zoo checkpoints, `module:factory` (+ weights=) and
#: Hugging Face folders, whose adapters hold a plain torch `module` (`blindspots.models.TRAINABLE_KINDS`).
LOOP_TRAINABLE_KINDS = ("zoo", "factory", "hf")


def finetune_blocker(spec: str, target: str, data: Iterable[str], *, import_dir: str | None = None) -> str | None:
    """Why the loop cannot fine-tune the target (one sentence), or None when it can.

    It can with a trainable kind (LOOP_TRAINABLE_KINDS) and both S0 and T0 (`data`: the [data] train and val values).
    import_dir: where a `module:function` spec imports from (see `load_spec`).
    """
    use_import_dir(spec, import_dir)
    kind = spec_kind(spec)
    if kind not in LOOP_TRAINABLE_KINDS:
        name = KIND_NAMES.get(kind, kind)
        article = "an" if name[:1] in "AEIOUaeiou" else "a"
        return (f"the target {target!r} is {article} {name} model, which blindspots cannot "
                "fine-tune: label S, retrain it in your own stack, then register the new model as the target's "
                "next version")
    if not all(data):
        return ("the project has no training data (--train-data and --val-data) to fine-tune with: label S, "
                "retrain the target in your own stack, then register the new model as the target's next version")
    return None
