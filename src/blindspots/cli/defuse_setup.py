"""Shared pieces of `blindspots defuse ...`: settings presets, data with class names, the held-out split.

Presets: `paper` is the Defuse paper's GPU settings (appendix B.2, MNIST); `cpu` finishes each
step in minutes on a 2-core CPU (fewer VAE epochs, smaller batches, Q = 50, a shorter λ list).
An option given on the command line always wins over its preset.

Held-out split: `train-classifier` holds out a stratified fraction of --data and records it (with
a fingerprint of the data) in the checkpoint; `identify` and `correct` recognise the same data and
leave those images out of identification and fine-tuning, so `correct` validates on images the
classifier never trained on.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional

import numpy as np
import typer

PRESET_NAMES = ("paper", "cpu")
#: option name -> (paper, cpu). Paper values: Defuse appendix B.2 (MNIST) on a GPU.
PRESETS: dict[str, tuple[Any, Any]] = {
    "clf_epochs": (5, 10),
    "vae_epochs": (800, 12),
    "vae_batch_size": (2048, 64),
    # Why 0.4 on CPU: appendix B.2 states both 4 and 0.4 for MNIST; after a dozen epochs β = 4
    # leaves most of the latent unused (measured in examples/defuse_mnist.py).
    "beta": (4.0, 0.4),
    "q": (500, 50),
    "max_per_source": (100, 100),
    "max_codes": (50_000, 10_000),
    "n_components": (100, 100),
    "n_per": (256, 256),
    "correct_epochs": (3, 3),
    "lambdas": ("1e-10,1e-9,1e-8,1e-7,1e-6,1e-5,1e-4,1e-3,1e-2,0.1,1,2,5,10,20,100,1000", "0.01,0.1,1,10,100"),
}

PRESET = typer.Option("paper", "--preset",
                      help="Settings for options left unset: 'paper' = the paper's GPU settings (default); "
                           "'cpu' = settings that finish in minutes on a 2-core CPU.")
CLASS_NAMES = typer.Option(None, "--class-names",
                           help="Text file, one class name per line in id order (IDX data carries no names; "
                                ".npz and class folders do). Votes may then use these names.")


def preset_help(text: str, key: str) -> str:
    """`text` followed by the option's two preset values."""
    paper, cpu = PRESETS[key]
    if key == "lambdas":
        paper = "the paper's 17, 1e-10 … 1000"
    return f"{text} (--preset paper: {paper}; cpu: {cpu})"


def resolve(preset: str, key: str, given: Any) -> Any:
    """The value of option `key`: `given` when set on the command line, else the preset's."""
    if preset not in PRESET_NAMES:
        raise ValueError(f"preset: expected one of {list(PRESET_NAMES)}, got {preset!r}")
    return given if given is not None else PRESETS[key][PRESET_NAMES.index(preset)]


def parse_lambdas(text: str) -> tuple[float, ...]:
    """'0.1,1,10' -> (0.1, 1.0, 10.0); a ValueError naming --lambdas otherwise."""
    try:
        lams = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"lambdas: expected comma-separated numbers like '0.1,1,10', got {text!r}") from None
    if not lams:
        raise ValueError(f"lambdas: expected at least one λ, got {text!r}")
    return lams


def load_data(spec: str, limit: Optional[int] = None, class_names: Optional[Path] = None):
    """A `ClassificationSet` from a data spec: first `limit` images; names from `class_names` (file) if given."""
    from blindspots.data.classfile import read_classes
    from blindspots.data.classsets import ClassificationSet, load_classification_set

    d = load_classification_set(spec)
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit: expected a positive number of images, got {limit}")
        d = d.subset(np.arange(min(limit, len(d))))
    if class_names is None:
        return d
    names = read_classes(class_names).names
    top = int(d.labels.max()) if len(d) else -1
    if len(names) <= top:
        raise ValueError(f"class_names: expected at least {top + 1} names in {class_names} (labels go up to {top}), "
                         f"got {len(names)}")
    return ClassificationSet(d.images, d.labels, names)


def fingerprint(data) -> str:
    """Short hash of a set's images and labels: recognises the same data under another path spelling."""
    h = hashlib.sha1()
    h.update(np.ascontiguousarray(data.images).tobytes())
    h.update(np.ascontiguousarray(data.labels).tobytes())
    return h.hexdigest()[:16]


def split_positions(data, sizes: list[int], seed: int) -> list[np.ndarray]:
    """Positions in `data` of each part of `data.split(sizes, seed=seed)` (sorted int64 arrays)."""
    from blindspots.data.classsets import ClassificationSet

    # The split depends only on the labels and the seed, so split a stand-in whose images are the
    # positions (4 bytes each) and read them back.
    pos = np.arange(len(data), dtype="<u4").view(np.uint8).reshape(len(data), 1, 4, 1)
    parts = ClassificationSet(pos, data.labels, data.class_names).split(sizes, seed=seed)
    return [p.images.reshape(len(p), 4).copy().view("<u4")[:, 0].astype(np.int64) for p in parts]


def holdout_record(data, spec: str, fraction: float, seed: int) -> tuple[np.ndarray, dict]:
    """Hold out a stratified `fraction` of `data` (deterministic per seed; 0: none).

    Returns (training positions int64 [n_train], record for the classifier checkpoint's meta).
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"holdout: expected a fraction in [0, 1), got {fraction}")
    n_hold = max(1, int(round(len(data) * fraction))) if fraction > 0 else 0
    hold, train = split_positions(data, [n_hold, len(data) - n_hold], seed)
    return train, {"data": str(spec), "n": len(data), "fingerprint": fingerprint(data),
                   "holdout_index": hold.tolist(), "holdout_fraction": fraction, "holdout_seed": seed}


def recorded_holdout(info: dict, data) -> Optional[np.ndarray]:
    """Held-out positions the classifier checkpoint (`info` from load_classifier_module) records for
    exactly this data, or None (trained elsewhere, or on other data)."""
    rec = (info.get("meta") or {}).get("trained_on")
    if not rec or rec.get("n") != len(data) or rec.get("fingerprint") != fingerprint(data):
        return None
    return np.asarray(rec["holdout_index"], dtype=np.int64)


def training_part(info: dict, data, spec: str) -> tuple[Any, str]:
    """(`data` without the classifier's recorded held-out images, a sentence saying which images those are)."""
    hold = recorded_holdout(info, data)
    if hold is None or len(hold) == 0:
        return data, f"all {len(data)} images of {spec}"
    keep = np.setdiff1d(np.arange(len(data)), hold)
    return data.subset(keep), (f"{len(keep)} images of {spec} (the {len(hold)} that train-classifier held out "
                               "are left out)")


def validation_split(info: dict, data, spec: str, val: Optional[str], val_data, val_fraction: float,
                     seed: int) -> tuple[Any, Any, str]:
    """(fine-tuning data, validation data, one line saying which split validates) for `correct`.

    Order: --val if given; else the held-out part train-classifier recorded for this data; else a
    fresh split of --data, flagged because the classifier may have trained on it.
    """
    hold = recorded_holdout(info, data)
    if val is not None:
        train = data.subset(np.setdiff1d(np.arange(len(data)), hold)) if hold is not None else data
        return train, val_data, f"validation: --val {val} ({len(val_data)} images)"
    if hold is not None and len(hold):
        keep = np.setdiff1d(np.arange(len(data)), hold)
        return (data.subset(keep), data.subset(hold),
                f"validation: {len(hold)} images of {spec} held out by train-classifier "
                f"(the classifier never trained on them); fine-tuning on the other {len(keep)}")
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction: expected a fraction in (0, 1), got {val_fraction}")
    n_val = max(1, int(round(len(data) * val_fraction)))
    v, t = split_positions(data, [n_val, len(data) - n_val], seed)
    return (data.subset(t), data.subset(v),
            f"validation: {n_val} images of {spec} split off here — NOT known to be held out: the classifier "
            "records no held-out split of this data (trained elsewhere or on other data); pass --val "
            "with images it never saw")
