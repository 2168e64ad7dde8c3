"""Hugging Face `transformers` semantic-segmentation models saved with `save_pretrained`.

The folder holds config.json (+ weights); `AutoModelForSemanticSegmentation` rebuilds it
(SegFormer, UperNet, DPT, BEiT, MobileViT, ...) without any download. Class names come from
`config.id2label`. A preprocessor_config.json in the folder gives the normalisation
(image_mean, image_std, rescale_factor) and the input size (size {height, width} -> resize;
size_divisor / ensure_multiple_of -> pad); without one: ImageNet mean/std, native size.
Logits (SegFormer: 1/4 resolution) are upsampled to each image's size.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from blindspots.data.classes import DEFAULT_IGNORE_INDEX, Classes
from blindspots.extras import require
from blindspots.models.adapters.inputs import IMAGENET_MEAN, IMAGENET_STD, UNIT_SCALE, InputPolicy, TorchPreprocess
from blindspots.models.adapters.torch import TorchSegmenter

# Lazy imports: transformers (optional: only the call that uses it needs it).

PREPROCESSOR_CONFIG = "preprocessor_config.json"


def is_hf_folder(path: Path) -> bool:
    """True for a folder written by `save_pretrained` (it has a config.json)."""
    return path.is_dir() and (path / "config.json").is_file()


class HFLogits(torch.nn.Module):
    """Wrap a transformers model so that forward(pixel_values [N, 3, H, W]) returns the logits tensor."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(pixel_values=x).logits


def read_preprocessor(folder: Path) -> tuple[TorchPreprocess, InputPolicy | None]:
    """Normalisation and input policy from the folder's preprocessor_config.json (defaults without one)."""
    f = folder / PREPROCESSOR_CONFIG
    if not f.is_file():
        return TorchPreprocess(), None
    try:
        cfg = json.loads(f.read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"path: expected a JSON {PREPROCESSOR_CONFIG} in {str(folder)!r}, got {e}") from None
    mean = cfg.get("image_mean", IMAGENET_MEAN) if cfg.get("do_normalize", True) else (0.0,)
    std = cfg.get("image_std", IMAGENET_STD) if cfg.get("do_normalize", True) else (1.0,)
    scale = cfg.get("rescale_factor", UNIT_SCALE) if cfg.get("do_rescale", True) else 1.0
    mean = mean if isinstance(mean, (list, tuple)) else [mean]
    std = std if isinstance(std, (list, tuple)) else [std]
    size = cfg.get("size") if cfg.get("do_resize", True) else None
    policy = None
    if isinstance(size, dict) and "height" in size and "width" in size:
        policy = InputPolicy(resize=(int(size["height"]), int(size["width"])))
    elif isinstance(size, dict) and "longest_edge" in size:
        policy = InputPolicy(max_side=int(size["longest_edge"]))
    multiple = cfg.get("size_divisor") or cfg.get("ensure_multiple_of")
    if policy is None and isinstance(multiple, int) and multiple > 1:
        policy = InputPolicy(pad=multiple)
    return TorchPreprocess(mean, std, scale), policy


def hf_classes(config: Any) -> Classes | None:
    """Class names from config.id2label (ids 0..C-1), or None when it does not name them all."""
    id2label = {int(k): str(v) for k, v in (getattr(config, "id2label", None) or {}).items()}
    if not id2label or sorted(id2label) != list(range(len(id2label))) or len(id2label) < 2:
        return None
    names = tuple(id2label[k] for k in range(len(id2label)))
    if len(set(names)) != len(names):
        return None
    return Classes(names, DEFAULT_IGNORE_INDEX if len(names) <= DEFAULT_IGNORE_INDEX else None)


def load_hf_module(folder: str | Path) -> torch.nn.Module:
    """The transformers model of a `save_pretrained` folder, in eval mode (no network access)."""
    transformers = require("transformers", "a Hugging Face model folder")
    AutoModelForSemanticSegmentation = transformers.AutoModelForSemanticSegmentation
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # no "Loading weights" bar per model
    try:
        return AutoModelForSemanticSegmentation.from_pretrained(str(folder), local_files_only=True).eval()
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()


class HFSegmenter(TorchSegmenter):
    """A `save_pretrained` folder of a transformers semantic-segmentation model as a Segmenter.

    folder: the folder (config.json + weights). Keyword overrides: preprocess, policy, classes,
    num_classes, output ("logits" by default), batch_size, device, info (as TorchSegmenter).
    `module` is an `HFLogits` wrapper (so it is a plain torch module: fine-tunable, hookable).
    """

    def __init__(self, folder: str | Path, **kwargs: Any) -> None:
        self.path = Path(folder)
        if not is_hf_folder(self.path):
            raise ValueError(f"path: expected a save_pretrained folder with config.json, got {str(self.path)!r}")
        model = load_hf_module(self.path)
        preprocess, policy = read_preprocessor(self.path)
        kwargs.setdefault("preprocess", preprocess)
        if kwargs.get("policy") is None:
            kwargs["policy"] = policy
        named = hf_classes(model.config)
        if kwargs.get("classes") is None and kwargs.get("num_classes") in (None, getattr(named, "num_classes", 0)):
            kwargs["classes"] = named
        super().__init__(HFLogits(model), **kwargs)
