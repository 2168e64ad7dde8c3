"""The model spec grammar, torch-free: what a spec's base names, its options, and its kind.

A spec is a path or `package.module:attr`, optionally followed by `?key=value&key=value` options
(`blindspots.models.load` documents every kind and option and builds the adapter). This module only
reads specs, so the project store, `status` and `export` can tell kinds apart and check options without
importing torch; a `module:attr` spec is imported to tell a factory from a callable.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
import sys
import zipfile
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import numpy as np

from blindspots.models.protocol import OUTPUT_KINDS, short_reason

__all__ = ["CHANNEL_ORDERS", "KIND_NAMES", "KIND_OPTIONS", "MODULE_SPEC", "PATH_OPTIONS", "PRECISIONS",
           "TRAINABLE_KINDS", "absolute_spec", "call_kwargs", "check_precision", "import_attr", "is_module_spec",
           "is_torchscript_archive", "parse_option", "parse_spec", "spec_kind"]

PRECISIONS = ("fp32", "fp16", "bf16")
"""Inference precisions of the torch kinds (`precision=`; autocast, float32 output)."""
CHANNEL_ORDERS = ("rgb", "bgr")
"""Channel orders a model may expect (`channels=`)."""

#: `package.module:attr` (identifiers and dots on both sides of one colon)
MODULE_SPEC = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def is_module_spec(base: str, base_dir: str | Path | None = None) -> bool:
    """True when a spec's base (the part before "?") names `package.module:attr`: it has that shape
    and is no existing file or folder (as given, or under `base_dir`). Anything else is a path, e.g.
    `runs/a-b:c.pt` or `C:\\models\\m.onnx`."""
    if not MODULE_SPEC.match(base):
        return False
    here = Path(base).expanduser()
    return not (here.exists() or (base_dir is not None and (Path(base_dir) / here).exists()))


OPTIONS = ("output", "num_classes", "batch_size", "device", "precision", "resize", "pad", "max_side", "channels",
           "mean", "std", "scale", "classes", "weights", "output_key")
"""Every option the grammar knows (a `module:attr` spec's other keys are its function's keyword arguments)."""
POLICY_OPTIONS = ("resize", "pad", "max_side", "channels")
NORM_OPTIONS = ("mean", "std", "scale")
_TORCH_OPTIONS = ("output", "num_classes", "batch_size", "device", "precision", *POLICY_OPTIONS, *NORM_OPTIONS,
                  "classes", "output_key")
KIND_OPTIONS: dict[str, tuple[str, ...]] = {
    "hf": _TORCH_OPTIONS,
    "zoo": _TORCH_OPTIONS,
    "torchscript": _TORCH_OPTIONS,
    "factory": (*_TORCH_OPTIONS, "weights"),
    "onnx": ("output", "num_classes", "batch_size", "device", *POLICY_OPTIONS, *NORM_OPTIONS, "classes", "output_key"),
    "callable": ("output", "num_classes", "batch_size", *POLICY_OPTIONS, "classes"),
    "precomputed": ("output", "num_classes", "classes"),
}
"""Spec kind -> the options that apply to it."""
TRAINABLE_KINDS = ("zoo", "factory", "hf")
"""Kinds whose adapter holds a plain torch `module` that fine-tuning can update (`seg.info["kind"]`)."""
KIND_NAMES = {"hf": "Hugging Face folder", "zoo": "zoo checkpoint", "torchscript": "TorchScript",
              "factory": "module:factory", "onnx": "ONNX", "callable": "callable", "precomputed": "precomputed folder"}


def check_precision(precision: str) -> str:
    """'fp32' | 'fp16' | 'bf16' (also 'float32', 'float16', 'bfloat16'); ValueError naming the argument."""
    text = str(precision).strip().lower()
    text = {"float32": "fp32", "float16": "fp16", "half": "fp16", "bfloat16": "bf16"}.get(text, text)
    if text not in PRECISIONS:
        raise ValueError(f"precision: expected one of {'|'.join(PRECISIONS)}, got {precision!r}")
    return text


def parse_option(key: str, value: Any, spec: str = "") -> Any:
    """One option, as a string from a spec or an already typed value, checked and typed."""
    where = f" in {spec!r}" if spec else ""
    if key not in OPTIONS:
        close = difflib.get_close_matches(str(key), OPTIONS, n=1, cutoff=0.6)  # a typo: name the option meant
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ValueError(f"spec: expected options among {OPTIONS}, got {key!r}{where}{hint}")
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
        if module and key not in OPTIONS and key.isidentifier():
            opts[key] = value  # a keyword argument of the user's function: its value stays a string
        else:
            opts[key] = parse_option(key, value, spec)
    return base, opts


def call_kwargs(opts: dict[str, Any]) -> dict[str, str]:
    """The keyword arguments among parsed options (the keys the grammar does not know)."""
    return {k: v for k, v in opts.items() if k not in OPTIONS}


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
    torch = sys.modules.get("torch")  # not imported: obj cannot be a torch Module (the grammar stays torch-free)
    if torch is not None and isinstance(obj, torch.nn.Module):
        return True  # with kwargs: refused in _factory_module (an instance takes none)
    if isinstance(obj, type):
        return torch is not None and issubclass(obj, torch.nn.Module)
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):
        return False
    given = set(kwargs or ())
    return all(p.default is not p.empty or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
               or (p.name in given and p.kind != p.POSITIONAL_ONLY) for p in params)



def spec_kind(spec: str) -> str:
    """The kind of a spec (a key of KIND_OPTIONS), without loading any weights.

    `module:attr` specs are imported to tell a factory from a callable.
    """
    base, opts = parse_spec(spec)
    try:
        return kind_of_base(base, opts)
    except ValueError as e:
        raise ValueError(f"model {spec!r}: {short_reason(e)}") from None


def kind_of_base(base: str, opts: dict[str, Any]) -> str:
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
