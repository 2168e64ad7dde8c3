"""`load_model(spec)`: ONE spec grammar for every entry point (CLI, loop, app, engines).

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
import importlib
import inspect
import os
import re
import sys
import zipfile
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import numpy as np
import torch

from blindspots.data.classfile import read_classes
from blindspots.models import adapters as A
from blindspots.models.adapters.features import CallableFeatures, PrecomputedFeatures
from blindspots.models.adapters.hf import read_preprocessor
from blindspots.models.adapters.inputs import (CHANNEL_ORDERS, IMAGENET_MEAN, IMAGENET_STD, UNIT_SCALE, InputPolicy,
                                               TorchPreprocess)
from blindspots.models.devices import AUTO, PRECISIONS, check_precision
from blindspots.models.probe import probe_model  # noqa: F401 - part of the loader's API
from blindspots.models.protocol import OUTPUT_KINDS, short_reason
from blindspots.models.spec_syntax import is_module_spec
from blindspots.models.zoo import load_segmenter

_OPTIONS = ("output", "num_classes", "batch_size", "device", "precision", "resize", "pad", "max_side", "channels",
            "mean", "std", "scale", "classes", "weights", "output_key")
_POLICY = ("resize", "pad", "max_side", "channels")
_NORM = ("mean", "std", "scale")
_TORCH = ("output", "num_classes", "batch_size", "device", "precision", *_POLICY, *_NORM, "classes", "output_key")
KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "hf": _TORCH,
    "zoo": _TORCH,
    "torchscript": _TORCH,
    "factory": (*_TORCH, "weights"),
    "onnx": ("output", "num_classes", "batch_size", "device", *_POLICY, *_NORM, "classes", "output_key"),
    "callable": ("output", "num_classes", "batch_size", *_POLICY, "classes"),
    "precomputed": ("output", "num_classes", "classes"),
}
"""Spec kind -> the options that apply to it."""
TRAINABLE_KINDS = ("zoo", "factory", "hf")
"""Kinds whose adapter holds a plain torch `module` that fine-tuning can update (`seg.info["kind"]`)."""
KIND_NAMES = {"hf": "Hugging Face folder", "zoo": "zoo checkpoint", "torchscript": "TorchScript",
              "factory": "module:factory", "onnx": "ONNX", "callable": "callable", "precomputed": "precomputed folder"}

def parse_option(key: str, value: Any, spec: str = "") -> Any:
    """One option, as a string from a spec or an already typed value, checked and typed."""
    where = f" in {spec!r}" if spec else ""
    if key not in _OPTIONS:
        raise ValueError(f"spec: expected options among {_OPTIONS}, got {key!r}{where}")
    text = str(value).strip()
    if key in ("num_classes", "batch_size", "pad", "max_side"):
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, bool) or text.isdigit()
        if not ok or int(text) < 1:
            raise ValueError(f"spec: expected {key} to be a positive integer, got {value!r}{where}")
        return int(text)
    if key == "output":
        if text not in OUTPUT_KINDS:
            raise ValueError(f"spec: expected output to be one of {'|'.join(OUTPUT_KINDS)}, got {value!r}{where}")
        return text
    if key == "precision":
        try:
            return check_precision(text)
        except ValueError:
            raise ValueError(f"spec: expected precision to be one of {'|'.join(PRECISIONS)}, got {value!r}{where}") \
                from None
    if key == "channels":
        if text.lower() not in CHANNEL_ORDERS:
            raise ValueError(f"spec: expected channels to be one of {'|'.join(CHANNEL_ORDERS)}, got {value!r}{where}")
        return text.lower()
    if key == "resize":
        if isinstance(value, (tuple, list)):
            text = "x".join(str(v) for v in value)
        if text.lower() in ("none", "native"):
            return None
        m = re.fullmatch(r"(\d+)[x,](\d+)", text.lower())
        if m is None or min(int(m.group(1)), int(m.group(2))) < 1:
            raise ValueError(f"spec: expected resize as HxW (e.g. 512x512) or none, got {value!r}{where}")
        return int(m.group(1)), int(m.group(2))
    if key in ("mean", "std"):
        parts = list(value) if isinstance(value, (tuple, list)) else text.split(",")
        try:
            nums = tuple(float(p) for p in parts)
        except ValueError:
            nums = ()
        if len(nums) not in (1, 3) or not all(np.isfinite(nums)) or (key == "std" and min(nums) <= 0):
            raise ValueError(f"spec: expected {key} as 1 or 3 comma-separated numbers"
                             f"{' > 0' if key == 'std' else ''} (e.g. 0.485,0.456,0.406), got {value!r}{where}")
        return nums
    if key == "scale":
        num, _, den = text.partition("/")
        try:
            scale = float(num) / (float(den) if den else 1.0)
        except (ValueError, ZeroDivisionError):
            scale = float("nan")
        if not np.isfinite(scale) or scale <= 0:
            raise ValueError(f"spec: expected scale as a positive number or fraction (e.g. 1/255), "
                             f"got {value!r}{where}")
        return scale
    if not text:
        raise ValueError(f"spec: expected a value for {key}, got an empty one{where}")
    return text  # device, classes, weights, output_key: checked where they are used


def parse_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """'path?output=logits&num_classes=5' -> ('path', {'output': 'logits', 'num_classes': 5}).

    For a `module:attr` spec, keys the grammar does not know stay in the dict as strings: the
    keyword arguments of the function or factory (`call_kwargs`).
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"spec: expected a model path or 'module:function', got {spec!r}")
    base, _, query = spec.strip().partition("?")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ValueError(f"spec: expected options as key=value joined by '&', got {query!r} in {spec!r}") from None
    module = is_module_spec(base)
    if not module:  # a quoted spec (it has to be, for '&') keeps the shell from expanding '~'
        base = os.path.expanduser(base)
    opts: dict[str, Any] = {}
    for key, value in pairs:
        if key in opts:
            raise ValueError(f"spec: expected each option once, got {key!r} twice in {spec!r}")
        if key in PATH_OPTIONS:
            value = os.path.expanduser(value)
        if module and key not in _OPTIONS and key.isidentifier():
            opts[key] = value  # a keyword argument of the user's function: its value stays a string
        else:
            opts[key] = parse_option(key, value, spec)
    return base, opts


def call_kwargs(opts: dict[str, Any]) -> dict[str, str]:
    """The keyword arguments among parsed options (the keys the grammar does not know)."""
    return {k: v for k, v in opts.items() if k not in _OPTIONS}


PATH_OPTIONS = ("classes", "weights")
"""Options whose values are file paths (relative to the current folder when the spec is loaded)."""


def absolute_spec(spec: str, base_dir: str | Path) -> str:
    """`spec` with its relative paths (the model path, classes=, weights=) made absolute against `base_dir`.

    For storing a spec that must load later from another folder; `module:attr` stays as is
    (it imports from the folder `load_model` runs in).
    """
    base, _, query = spec.strip().partition("?")
    parse_spec(spec)  # validate first

    def absolute(p: str) -> str:
        q = Path(p).expanduser()
        return str(q if q.is_absolute() else (Path(base_dir) / q).resolve())

    if not is_module_spec(base, base_dir):  # a module spec (and its kwargs) stays verbatim
        base = absolute(base)
    pairs = [(k, absolute(v) if k in PATH_OPTIONS else v) for k, v in parse_qsl(query, keep_blank_values=True)]
    return base + ("?" + urlencode(pairs, safe="/:,\\") if pairs else "")


def is_torchscript_archive(path: Path) -> bool:
    """True for a torch.jit.save zip archive (it has `<name>/code/` entries; torch.save files do not)."""
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as z:
        return any("/code/" in n for n in z.namelist())


def import_attr(target: str) -> Any:
    """`package.module:attr` -> the attribute, importing from the current folder first."""
    module_name, _, attr = target.partition(":")
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # a user's own module next to their data, as `python -m` would find it
    importlib.invalidate_caches()
    try:
        obj: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as e:  # noqa: BLE001 - the user's module may raise anything at import
        raise ValueError(f"expected an importable 'module:function' (from the current folder {cwd} or an "
                         f"installed package), got {target!r} ({type(e).__name__}: {short_reason(e)})") from None
    return obj


def _is_factory(obj: Any, kwargs: dict[str, str] | None = None) -> bool:
    """An nn.Module, a Module class, or a function callable with only `kwargs` (it builds the model)."""
    if isinstance(obj, torch.nn.Module):
        return True  # with kwargs: refused in _factory_module (an instance takes none)
    if isinstance(obj, type):
        return issubclass(obj, torch.nn.Module)
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return False
    given = set(kwargs or ())
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               or (p.name in given and p.kind != p.POSITIONAL_ONLY) for p in params)


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
        raise ValueError(f"expected options among {_OPTIONS} or keyword arguments of {target} "
                         f"{tuple(accepts)}, got {unknown}") from None


def spec_kind(spec: str) -> str:
    """The kind of a spec (a key of KIND_OPTIONS), without loading any weights.

    `module:attr` specs are imported to tell a factory from a callable.
    """
    base, opts = parse_spec(spec)
    try:
        return _kind(base, opts)
    except ValueError as e:
        raise ValueError(f"model {spec!r}: {short_reason(e)}") from None


def _kind(base: str, opts: dict[str, Any]) -> str:
    path = Path(base)
    if path.is_dir():
        return "hf" if (path / "config.json").is_file() else "precomputed"
    suffix = path.suffix.lower()
    if path.is_file():
        if suffix == ".onnx":
            return "onnx"
        if suffix in (".ts", ".torchscript"):
            return "torchscript"
        if suffix in (".pt", ".pth"):
            return "torchscript" if is_torchscript_archive(path) else "zoo"
        what = f"a {suffix!r} file" if suffix else "a file without suffix"
        raise ValueError(f"expected a folder of .npy, a Hugging Face folder (config.json), an .onnx, "
                         f".ts/.torchscript or .pt/.pth file, or 'module:function', got {what} {base!r}")
    if path.exists():
        raise ValueError(f"expected a folder of .npy, an .onnx, .ts/.torchscript or .pt/.pth file, got {base!r}")
    if is_module_spec(base):  # not an existing path (checked above)
        return "factory" if "weights" in opts or _is_factory(import_attr(base), call_kwargs(opts)) else "callable"
    raise ValueError(f"expected an existing path or 'module:function', got {base!r} (no such file)")


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
        kind = _kind(base, {**opts, **typed})
        # a caller's defaults (e.g. batch_size for every model) are dropped where they do not apply;
        # an option the user wrote into the spec is an error there
        opts.update({k: v for k, v in typed.items() if k in KIND_OPTIONS[kind]})
        kwargs = call_kwargs(opts)
        if kwargs and kind not in ("callable", "factory"):  # parse_spec keeps them for module:attr only
            raise ValueError(f"expected options among {_OPTIONS}, got {sorted(kwargs)[0]!r}")
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
    if not any(k in opts for k in _POLICY if k != "channels"):
        return None
    return InputPolicy(resize=opts.get("resize"), pad=opts.get("pad"), max_side=opts.get("max_side"))


def _with_channels(seg: Any, channels: str | None) -> Any:
    """The adapter with `channels` added to whatever policy it settled on (spec, ONNX fixed size, HF config)."""
    if channels is not None:
        seg.policy = replace(seg.policy, channels=channels)
    return seg


def _preprocess(opts: dict[str, Any], base: TorchPreprocess | None = None) -> TorchPreprocess | None:
    if not any(k in opts for k in _NORM):
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
        raise ValueError(f"expected a blindspots zoo checkpoint or a TorchScript file (both are zip archives "
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
