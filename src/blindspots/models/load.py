"""`load_model(spec)`: ONE loader for every entry point (CLI, loop, app, engines); the grammar it reads
(parsing, kinds, options) lives, torch-free, in `blindspots.models.spec_syntax`.

A spec is a path or `module:attr`, optionally followed by `?key=value&key=value` options.
Kinds, in the order they are recognised:
- a folder with config.json          -> HFSegmenter (transformers `save_pretrained` folder)
- any other folder                    -> PrecomputedSegmenter (one `<id>.npy` [C, H, W] per image id)
- `*.onnx`                            -> OnnxSegmenter (onnxruntime, CPU)
- `*.ts`, `*.torchscript`             -> TorchScriptSegmenter
- `*.pt`, `*.pth`                     -> TorchScript when the archive holds code, else a blindspots
                                         zoo checkpoint (`blindspots.models.zoo`)
- `package.module:factory`            -> TorchSegmenter(factory(**kwargs)) when the attribute is an
                                         nn.Module, a Module class or a function needing no other
                                         arguments; with `weights=state_dict.pt` (loaded weights_only)
- `package.module:function`           -> CallableSegmenter(function(uint8 [N, H, W, 3], **kwargs) -> scores)
`module:attr` specs import from the current working directory first (no PYTHONPATH needed).
For these two kinds only, options the grammar does not know are keyword arguments, passed as
strings: `pkg.mod:segment?path=x.tflite&size=256` calls segment(images, path="x.tflite", size="256").

Options: output=probabilities|logits|labels · num_classes=C · batch_size=B ·
device=auto|cpu|cuda|cuda:N (default auto: CUDA when torch sees a GPU, else CPU; for ONNX, ONNX Runtime's
CUDA provider when it is installed) · precision=fp32|fp16|bf16 (torch kinds; autocast, float32 output) ·
resize=HxW (or resize=none) · pad=N · max_side=L · channels=rgb|bgr · mean=a,b,c · std=a,b,c ·
scale=1/255 · classes=FILE (JSON or text, read by `blindspots.data.classfile`) · weights=FILE (factories) ·
output_key=KEY.
Every error is a one-line ValueError naming the spec.
"""
from __future__ import annotations

import functools
import inspect
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from blindspots.data.classfile import read_classes
from blindspots.models import adapters as A
from blindspots.models.adapters.features import CallableFeatures, PrecomputedFeatures
from blindspots.models.adapters.hf import read_preprocessor
from blindspots.models.adapters.inputs import (IMAGENET_MEAN, IMAGENET_STD, UNIT_SCALE, InputPolicy,
                                               TorchPreprocess)
from blindspots.models.devices import AUTO
from blindspots.models.probe import probe_model  # noqa: F401 - part of the loader's API
from blindspots.models.protocol import short_reason
from blindspots.models.spec_syntax import (KIND_NAMES, KIND_OPTIONS, NORM_OPTIONS, OPTIONS, POLICY_OPTIONS, call_kwargs,
                                            import_attr, kind_of_base, parse_option, parse_spec)
from blindspots.models.zoo import load_segmenter


def _check_kwargs(fn: Any, kwargs: dict[str, str], target: str, *, images: bool) -> None:
    """The function accepts `kwargs` (and, for a callable, the images first): else one line naming the option."""
    if not kwargs:
        return
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin without a signature: the call itself will tell
    try:
        sig.bind_partial(*((None,) if images else ()), **kwargs)
    except TypeError:
        accepts = [p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
        accepts = accepts[1:] if images else accepts  # the first parameter of a callable takes the images
        unknown = sorted(set(kwargs) - set(accepts)) or sorted(kwargs)
        raise ValueError(f"expected options among {OPTIONS} or keyword arguments of {target} "
                         f"{tuple(accepts)}, got {unknown}") from None


def load_model(spec: str, **overrides: Any) -> Any:
    """A Segmenter for `spec` (see the module docstring).

    overrides: options as keywords (e.g. batch_size=8, device="cuda"); those not None beat the
    spec's, and those that do not apply to the spec's kind are ignored.

    The result has num_classes, classes (a Classes), info (kind, spec, ...) and
    predict_proba(images, ids=None) (a precomputed folder reads by ids). ValueError, one line
    naming the spec, for anything that cannot be loaded.
    """
    base, opts = parse_spec(spec)
    typed = {k: parse_option(k, v, spec) for k, v in overrides.items() if v is not None}
    try:
        kind = kind_of_base(base, {**opts, **typed})
        # a caller's defaults (e.g. batch_size for every model) are dropped where they do not apply;
        # an option the user wrote into the spec is an error there
        opts.update({k: v for k, v in typed.items() if k in KIND_OPTIONS[kind]})
        kwargs = call_kwargs(opts)
        if kwargs and kind not in ("callable", "factory"):  # parse_spec keeps them for module:attr only
            raise ValueError(f"expected options among {OPTIONS}, got {sorted(kwargs)[0]!r}")
        extra = sorted(set(opts) - set(KIND_OPTIONS[kind]) - set(kwargs))
        if extra:
            raise ValueError(f"option {extra[0]!r} does not apply to a {KIND_NAMES[kind]} model; "
                             f"expected options among {KIND_OPTIONS[kind]}")
        seg = _with_channels(_build(kind, base, opts), opts.get("channels"))
    except ValueError as e:
        raise ValueError(f"model {spec!r}: {short_reason(e)}") from None
    except Exception as e:  # noqa: BLE001 - torch / onnxruntime / transformers / user code raise anything
        raise ValueError(f"model {spec!r}: {type(e).__name__}: {short_reason(e)}") from e
    seg.info.setdefault("kind", kind)
    seg.info["spec"] = spec
    return seg


def _policy(opts: dict[str, Any]) -> InputPolicy | None:
    """The sizing options as a policy (None: the adapter's own default; `channels` is set after the build)."""
    if not any(k in opts for k in POLICY_OPTIONS if k != "channels"):
        return None
    return InputPolicy(resize=opts.get("resize"), pad=opts.get("pad"), max_side=opts.get("max_side"))


def _with_channels(seg: Any, channels: str | None) -> Any:
    """The adapter with `channels` added to whatever policy it settled on (spec, ONNX fixed size, HF config)."""
    if channels is not None:
        seg.policy = replace(seg.policy, channels=channels)
    return seg


def _preprocess(opts: dict[str, Any], base: TorchPreprocess | None = None) -> TorchPreprocess | None:
    if not any(k in opts for k in NORM_OPTIONS):
        return None
    base = base or TorchPreprocess(IMAGENET_MEAN, IMAGENET_STD, UNIT_SCALE)
    return TorchPreprocess(opts.get("mean", base.mean), opts.get("std", base.std), opts.get("scale", base.scale))


def _build(kind: str, base: str, opts: dict[str, Any]) -> Any:
    """Construct the adapter of `kind` from checked options."""
    path = Path(base)
    classes = _read_classes(opts["classes"]) if "classes" in opts else None
    common = {"num_classes": opts.get("num_classes"), "classes": classes, "info": {"kind": kind}}
    torch_kw = {**common, "output": opts.get("output", "logits"), "batch_size": opts.get("batch_size", 16),
                "device": opts.get("device", AUTO), "precision": opts.get("precision", "fp32"), "policy": _policy(opts),
                "output_key": opts.get("output_key"),
                "preprocess": _preprocess(opts)}
    if kind == "precomputed":
        return A.PrecomputedSegmenter(path, output=opts.get("output", "probabilities"), **common)
    if kind == "hf":
        pre = read_preprocessor(path)[0]
        torch_kw["preprocess"] = _preprocess(opts, pre) or pre
        return A.HFSegmenter(path, **torch_kw)
    if kind == "onnx":
        norm = _preprocess(opts) or TorchPreprocess()
        return A.OnnxSegmenter(path, opts.get("num_classes"), output=opts.get("output", "logits"),
                               batch_size=opts.get("batch_size", 16), mean=norm.mean, std=norm.std, scale=norm.scale,
                               output_name=opts.get("output_key"), device=opts.get("device", AUTO),
                               policy=_policy(opts), classes=classes,
                               info=common["info"])
    if kind == "torchscript":
        return A.TorchScriptSegmenter(path, **torch_kw)
    if kind == "zoo":
        return _load_zoo(path, torch_kw)
    kwargs = call_kwargs(opts)
    if kind == "factory":
        return A.TorchSegmenter(_factory_module(base, opts.get("weights"), kwargs), **torch_kw)
    fn = import_attr(base)
    _check_kwargs(fn, kwargs, base, images=True)
    return A.CallableSegmenter(functools.partial(fn, **kwargs) if kwargs else fn, opts.get("num_classes"),
                               output=opts.get("output", "probabilities"), batch_size=opts.get("batch_size"),
                               policy=_policy(opts), classes=classes, info=common["info"])


def _read_classes(path: str) -> Any:
    """The one classes-file reader (`blindspots.data.classfile`, shared with the data layouts)."""
    return read_classes(path)


def _load_zoo(path: Path, torch_kw: dict[str, Any]) -> Any:
    if not zipfile.is_zipfile(path):
        raise ValueError(f"expected a model-zoo checkpoint or a TorchScript file (both are zip archives "
                         f"written by torch), got a file that is neither: {str(path)!r}")
    kw = {k: v for k, v in torch_kw.items() if k not in ("num_classes", "info") and v is not None}
    try:
        seg = load_segmenter(path, **kw)
    except ValueError as e:
        raise ValueError(f"{short_reason(e, 200)}; for a plain state_dict give its architecture: "
                         "'package.module:factory?weights=FILE'") from None
    if torch_kw.get("num_classes") not in (None, seg.num_classes):
        raise ValueError(f"num_classes: expected {seg.num_classes} (the checkpoint's), got {torch_kw['num_classes']}")
    return seg


def _factory_module(target: str, weights: str | None, kwargs: dict[str, str] | None = None) -> Any:
    """factory(**kwargs) -> nn.Module, with the state dict of `weights` loaded (weights_only: no code runs)."""
    obj = import_attr(target)
    kwargs = kwargs or {}
    if isinstance(obj, torch.nn.Module) and kwargs:
        raise ValueError(f"expected a factory or Module class for keyword arguments {sorted(kwargs)}, "
                         f"got the nn.Module instance {target}")
    if not isinstance(obj, torch.nn.Module):
        _check_kwargs(obj, kwargs, target, images=False)
    module = obj if isinstance(obj, torch.nn.Module) else obj(**kwargs)
    if not isinstance(module, torch.nn.Module):
        raise ValueError(f"expected {target}() to return a torch nn.Module, got {type(module).__name__}")
    if weights is None:
        return module
    wpath = Path(weights)
    if not wpath.is_file():
        raise ValueError(f"weights: expected an existing state_dict file, got {weights!r}")
    try:
        state = torch.load(wpath, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises many types for a bad or pickled file
        raise ValueError(f"weights: expected a state_dict file that loads with weights_only=True, got {weights!r} "
                         f"({short_reason(e, 160)})") from None
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]  # common wrapper {"state_dict": ..., "epoch": ...}
    if not isinstance(state, dict):
        raise ValueError(f"weights: expected a state_dict (a dict of tensors), got {type(state).__name__}")
    try:
        module.load_state_dict(state)
    except RuntimeError as e:
        raise ValueError(f"weights: expected a state_dict that fits {target}(), got {weights!r} "
                         f"({short_reason(e, 200)})") from None
    return module


def load_features(source: str | Path) -> Any:
    """A feature source for surprise from the command line: a folder of `<image id>.npy` maps
    (`PrecomputedFeatures`) or `package.module:function` returning [N, D, h, w] / [N, D] (`CallableFeatures`)."""
    text = str(source)
    if Path(text).is_dir():
        return PrecomputedFeatures(text, info={"spec": text, "kind": "precomputed features"})
    if ":" in text and not Path(text).exists():
        try:
            fn = import_attr(text)
        except ValueError as e:
            raise ValueError(f"features: {e}") from None
        return CallableFeatures(fn, info={"spec": text, "kind": "callable features"})
    raise ValueError(f"features: expected a folder of <image id>.npy feature maps or 'module:function', got {text!r}")
