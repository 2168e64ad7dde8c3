"""The one checkpoint format: a dict written by `torch.save` (atomically) with a `format` tag, read back
with `torch.load(weights_only=True)` — tensors, numbers, strings, lists, dicts; no code runs from the file.

Every checkpoint blindspots writes goes through `save_checkpoint_dict` and every read through
`load_checkpoint_dict`: zoo segmenters, zoo classifiers, β-VAEs, training/resume states and plain
state dicts. Anything else (random bytes, a truncated file, a pickled stranger's checkpoint that needs
its classes to load) is a one-line ValueError naming the file. Files written before the tag existed
(classifier, β-VAE and resume files, λ-sweep state dicts) hold the same plain data and still load:
callers name the keys such an untagged file must have.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import nn

from blindspots.atomic import write_atomic

FORMAT_KEY = "format"
#: a bare module state dict (weights only), e.g. one λ of the Defuse correction sweep
STATE_DICT_FORMAT = "blindspots.state-dict/1"
#: a zoo classifier (models/classifier_zoo.py)
CLASSIFIER_FORMAT = "blindspots.classifier/1"
#: a Defuse β-VAE, fitted or mid-training (defuse/vae.py)
VAE_FORMAT = "blindspots.beta-vae/1"
#: a training state for resuming (module, optimizer, epoch, history, settings)
TRAIN_STATE_FORMAT = "blindspots.train-state/1"


def save_checkpoint_dict(path: str | Path, payload: dict[str, Any], *, format: str) -> Path:
    """Write {format: <format>, **payload} atomically (`atomic.write_atomic`: an interrupted save never
    leaves a half-written checkpoint). Creates the parent folder. Returns the path."""
    return write_atomic(path, lambda t: torch.save({FORMAT_KEY: format, **payload}, t))


def _why(exc: BaseException) -> str:
    """A short reason from torch's (long, multi-paragraph) load error."""
    text = str(exc)
    found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", text)
    if found:
        return f"it needs code to load (class {found.group(1)}); only weights-only checkpoints are read"
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    if first.startswith("Weights only load failed"):
        return "not a torch checkpoint, or one that needs code to load"
    return first[:200]


def load_checkpoint_dict(path: str | Path, *, format: str | Iterable[str], legacy_keys: Iterable[str] | None = None,
                         argument: str = "path", what: str = "blindspots checkpoint",
                         map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Read a checkpoint dict written by `save_checkpoint_dict` with one of the `format` tags.

    legacy_keys: an untagged dict holding all these keys is accepted too (files written before the
        tag; None: untagged files are refused).
    argument / what: name the argument and the expected thing in the error message.
    Raises ValueError (one line) for a missing file, an unreadable one, or another format.
    """
    formats = (format,) if isinstance(format, str) else tuple(format)
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{argument}: expected an existing checkpoint file, got {str(path)!r}")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as exc:  # torch raises many types for a bad file
        raise ValueError(f"{argument}: expected a {what}, got an unreadable file {str(path)!r} ({_why(exc)})") from exc
    if isinstance(ckpt, dict) and ckpt.get(FORMAT_KEY) in formats:
        return ckpt
    if legacy_keys is not None and isinstance(ckpt, dict) and FORMAT_KEY not in ckpt \
            and all(k in ckpt for k in legacy_keys):
        return ckpt
    got = ckpt.get(FORMAT_KEY) if isinstance(ckpt, dict) else type(ckpt).__name__
    raise ValueError(f"{argument}: expected a {what} ({' or '.join(formats)}), got {got!r} in {str(path)!r}")


def save_state_dict(path: str | Path, state: dict[str, torch.Tensor]) -> Path:
    """A module's state dict alone (tagged STATE_DICT_FORMAT)."""
    return save_checkpoint_dict(path, {"state_dict": {k: v.detach().cpu() for k, v in state.items()}},
                                format=STATE_DICT_FORMAT)


def load_state_dict(path: str | Path, *, argument: str = "path") -> dict[str, torch.Tensor]:
    """A state dict from `save_state_dict`, or a bare `torch.save(module.state_dict())` file (legacy)."""
    ckpt = load_checkpoint_dict(path, format=STATE_DICT_FORMAT, legacy_keys=(), argument=argument,
                                what="state dict")
    if ckpt.get(FORMAT_KEY) == STATE_DICT_FORMAT:
        return ckpt["state_dict"]
    if not all(isinstance(v, torch.Tensor) for v in ckpt.values()):
        raise ValueError(f"{argument}: expected a state dict of tensors, got other values in {str(path)!r}")
    return ckpt


def load_weights(module: nn.Module, path: str | Path, *, argument: str = "path") -> nn.Module:
    """Load a `save_state_dict` file into `module` (in place); returns the module."""
    module.load_state_dict(load_state_dict(path, argument=argument))
    return module
