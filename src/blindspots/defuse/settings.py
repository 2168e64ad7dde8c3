"""Defuse's settings and data, shared by the `blindspots defuse` commands and Python: presets, data specs with
class names, and the held-out split.

Presets: `paper` is the Defuse paper's GPU settings (appendix B.2, MNIST); `cpu` finishes each step in minutes
on a 2-core CPU (fewer VAE epochs, smaller batches, Q = 50, a shorter λ list), from `defuse.presets` (MNIST);
`cpu-fashion` etc. are `defuse.presets`' measured settings for other sets. The paper's λ list is read when
first needed (`defuse.correct` imports torch; the command line starts without it). A value given explicitly
always wins over its preset (`resolve`).

Held-out split: `train-classifier` holds out a stratified fraction of the data and records it (with a
fingerprint of the data) in the checkpoint (`holdout_record`); `identify` and `correct` recognise the same
data and leave those images out of identification and fine-tuning (`training_part`, `validation_split`), so
`correct` validates on images the classifier never trained on.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Optional

import numpy as np

from blindspots.data.classsets import ClassificationSet, load_classification_set, split_indices
from blindspots.data.classfile import read_classes
from blindspots.defuse.presets import CPU_LAMBDAS, CPU_PRESETS

# Lazy imports: torch (`defuse.correct`'s PAPER_LAMBDAS, read by `presets`: the command line starts without it).

#: Paper values: Defuse appendix B.2 (MNIST) on a GPU; off MNIST the paper uses a = b = 75.
#: lambdas None = defuse.correct.PAPER_LAMBDAS (the paper's 17).
PAPER: dict[str, Any] = {
    "clf_epochs": 5, "vae_epochs": 800, "vae_batch_size": 2048, "beta": 4.0, "latent_dim": 10, "q": 500,
    "a": 50.0, "b": 50.0, "max_per_source": 100, "recon_min_proba": 0.5, "max_codes": 50_000, "n_components": 100,
    "n_per": 256, "tau": 0.5, "correct_epochs": 3, "lambdas": None,
}

def preset_table() -> dict[str, dict[str, Any]]:
    """preset name -> option name -> value: 'paper', 'cpu' (defuse.presets' MNIST preset) and 'cpu-<set>'
    for defuse.presets' other measured data sets. PAPER_LAMBDAS is imported here, not at CLI start (defuse.correct
    loads torch)."""
    from blindspots.defuse.correct import PAPER_LAMBDAS

    def lams(values) -> str:
        return ",".join(f"{x:g}" for x in values)

    def cpu(p) -> dict[str, Any]:
        return {**PAPER, "clf_epochs": 10, "vae_epochs": p.vae_epochs, "vae_batch_size": p.vae_batch,
                "beta": p.beta, "latent_dim": p.latent_dim, "q": p.q, "a": p.a, "b": p.b,
                "max_per_source": p.max_per_source, "recon_min_proba": p.recon_min_proba, "max_codes": 10_000,
                "tau": p.tau, "correct_epochs": p.epochs_correct, "lambdas": lams(CPU_LAMBDAS)}

    return {"paper": {**PAPER, "lambdas": lams(PAPER_LAMBDAS)}, "cpu": cpu(CPU_PRESETS["mnist"]),
            **{f"cpu-{k}": cpu(v) for k, v in CPU_PRESETS.items() if k != "mnist"}}


def resolve(preset: str, key: str, given: Any) -> Any:
    """The value of option `key`: `given` when set on the command line, else the preset's."""
    table = preset_table()
    if preset not in table:
        raise ValueError(f"preset: expected one of {list(table)}, got {preset!r}")
    return given if given is not None else table[preset][key]


def format_presets() -> str:
    """All presets as a text table: one row per option, one column per preset."""
    table = preset_table()
    names = list(table)
    lines = [f"{'option':16s} " + " ".join(f"{n:>14s}" for n in names)]
    for key in PAPER:
        if key == "lambdas":
            continue
        lines.append(f"{key:16s} " + " ".join(f"{table[n][key]!s:>14s}" for n in names))
    lines += [f"lambdas ({n}): {table[n]['lambdas']}" for n in names]
    return "\n".join(lines)


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


def holdout_record(data, spec: str, fraction: float, seed: int) -> tuple[np.ndarray, dict]:
    """Hold out a stratified `fraction` of `data` (deterministic per seed; 0: none).

    Returns (training positions int64 [n_train], record for the classifier checkpoint's meta).
    """
    if not 0 <= fraction < 1:
        raise ValueError(f"holdout: expected a fraction in [0, 1), got {fraction}")
    n_hold = max(1, int(round(len(data) * fraction))) if fraction > 0 else 0
    hold, train = split_indices(data.labels, [n_hold, len(data) - n_hold], seed=seed)
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
    v, t = split_indices(data.labels, [n_val, len(data) - n_val], seed=seed)
    return (data.subset(t), data.subset(v),
            f"validation: {n_val} images of {spec} split off here — NOT known to be held out: the classifier "
            "records no held-out split of this data (trained elsewhere or on other data); pass --val "
            "with images it never saw")
