"""Saving a fine-tuned target of a non-zoo trainable kind as the next version's spec.

A zoo target is saved as a zoo checkpoint (`FinetuneStep`). The other kinds in
`blindspots.models.TRAINABLE_KINDS` are saved in the form their own spec loads back, keeping
the spec's options (input policy, normalisation, classes=, factory keyword arguments):

- `package.module:factory?weights=OLD.pt&...` -> a state-dict file, `...?weights=NEW.pt&...`
- a Hugging Face folder -> `save_pretrained` into a new folder (with the old folder's
  preprocessor and other non-weight files), `NEW_FOLDER?...`
"""
from __future__ import annotations

import shutil
from pathlib import Path
from urllib.parse import parse_qsl, urlencode

from torch import nn

from blindspots.models.checkpoints import save_state_dict

__all__ = ["with_option", "save_finetuned"]

# files `save_pretrained` writes itself (weights and config); everything else in the folder is copied
_HF_OWN = (".safetensors", ".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt")


def with_option(spec: str, key: str, value: str) -> str:
    """`spec` with option `key` set to `value` (added last if absent; other options kept in order)."""
    base, _, query = spec.partition("?")
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(k == key for k, _ in pairs):
        pairs = [(k, value if k == key else v) for k, v in pairs]
    else:
        pairs.append((key, value))
    return base + "?" + urlencode(pairs, safe="/:,\\")


def save_finetuned(kind: str, spec: str, module: nn.Module, dest: Path) -> str:
    """Save `module` (fine-tuned from the model `spec` of `kind`) under `dest` (a path without
    suffix: `dest.pt` for a factory, the folder `dest/` for Hugging Face); returns the new spec.

    module: the adapter's `.module` after fine-tuning (for "hf" an `HFLogits` wrapper).
    """
    dest = Path(dest)
    base, sep, query = spec.partition("?")
    if kind == "factory":
        path = save_state_dict(dest.with_suffix(".pt"), module.state_dict())
        return with_option(spec, "weights", str(path.resolve()))
    if kind == "hf":
        inner = getattr(module, "model", None)
        if not hasattr(inner, "save_pretrained"):
            raise ValueError(f"module: expected an HFLogits wrapper of a transformers model, got {type(module).__name__}")
        if dest.exists():  # a crashed earlier attempt: write afresh
            shutil.rmtree(dest)
        dest.mkdir(parents=True)
        src = Path(base)
        for f in sorted(src.iterdir()):  # preprocessor_config.json, a classes file, a README ...
            if f.is_file() and f.name != "config.json" and not f.name.endswith(_HF_OWN) \
                    and not f.name.endswith(".index.json"):
                shutil.copy2(f, dest / f.name)
        inner.cpu().save_pretrained(dest)
        return str(dest.resolve()) + sep + query
    raise ValueError(f"kind: expected 'factory' or 'hf' (a zoo target is saved as a zoo checkpoint), got {kind!r}")
