"""The scan manifest `scan.json`: what was scanned, with which settings and models.

Keys: version, pool_root, n_images, ids_sha256, shard_size, n_shards, num_classes, classes (the
target's `Classes.to_dict()`), save_maps, resize, target, competitors, models (name -> kind,
fingerprint, classes: the model's class names).
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

from blindspots.atomic import write_atomic
from blindspots.scan.layout import MANIFEST, ScanLayout

SCAN_VERSION = 1
# Settings that must match for a scan folder to be resumed / extended.
_FIXED = ("version", "ids_sha256", "n_images", "shard_size", "num_classes", "resize", "save_maps")


def ids_digest(ids: Sequence[str]) -> str:
    """sha256 of the sorted id list: identifies a pool's content listing."""
    h = hashlib.sha256()
    for i in ids:
        h.update(i.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def load_manifest(out_dir: str | Path) -> dict | None:
    """The manifest of a scan folder, or None when there is none; ValueError when unreadable."""
    path = ScanLayout(out_dir).manifest
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"out_dir: expected a valid {MANIFEST} in {str(path.parent)!r}, "
                         f"got unreadable JSON: {e}") from None


def save_manifest(out_dir: str | Path, manifest: dict) -> None:
    path = ScanLayout(out_dir).manifest
    write_atomic(path, lambda tmp: tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True)))


def merge_manifest(old: dict | None, new: dict) -> dict:
    """Check that `new` continues the scan in `old` and return the merged manifest.

    Raises ValueError naming the first setting that differs (pool content, shard size, number
    of classes, resize, map saving) or a model whose name is reused for a different model.
    """
    if old is None:
        return new
    for key in _FIXED:
        if old.get(key) != new.get(key):
            hint = "the pool's images changed" if key in ("ids_sha256", "n_images") else f"{key} changed"
            raise ValueError(f"out_dir: expected the same {key} as the scan already there ({old.get(key)!r}), "
                             f"got {new.get(key)!r} ({hint}); use a new out_dir to start a fresh scan")
    models = dict(old.get("models", {}))
    for name, info in new["models"].items():
        before = models.get(name)
        if before and before.get("fingerprint") and info.get("fingerprint") \
                and before["fingerprint"] != info["fingerprint"]:
            raise ValueError(f"models: expected model {name!r} to be the one already scanned into this out_dir "
                             f"(fingerprint {before['fingerprint'][:12]}), got a different one "
                             f"({info['fingerprint'][:12]}); give it a new name")
        if before and before.get("settings") is not None and info.get("settings") is not None \
                and before["settings"] != info["settings"]:  # scans before the field: not checked
            raise ValueError(f"models: expected model {name!r} with the options it was scanned with "
                             f"({before['settings'] or 'none'!r}), got {info['settings'] or 'none'!r}; its maps "
                             "would be kept as they are: give it a new name, or use a new out_dir")
        models[name] = info if not before else {**before, **{k: v for k, v in info.items() if v is not None}}
    return {**old, **new, "models": models}
