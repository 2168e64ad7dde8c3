"""The scan manifest `scan.json`: what was scanned, with which settings and models.

Keys: version, pool_root, pool_source (the source's `describe()`: how to open the pool again),
pool_fingerprint (the source's cheap content stamp, or None), n_images, ids_sha256, shard_size,
n_shards, num_classes, classes (the target's `Classes.to_dict()`), save_maps, resize, target,
competitors, models (name -> kind, fingerprint, classes: the model's class names).

Beside it, `ids.parquet` keeps the sorted scan ids (one Arrow column). A scan resumed on the same
source with the same fingerprint takes its ids from there (`stored_ids`) instead of listing the
pool again: a resume reads the manifest and the finished shards' names, nothing per image.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from blindspots.atomic import write_atomic
from blindspots.data.sources import open_pool
from blindspots.scan.layout import MANIFEST, ScanLayout

SCAN_VERSION = 1
# Settings that must match for a scan folder to be resumed / extended.
_FIXED = ("version", "ids_sha256", "n_images", "shard_size", "num_classes", "resize", "save_maps")


IDS_FILE = "ids.parquet"
_DIGEST_CHUNK = 1 << 16


def ids_digest(ids: Sequence[str] | pa.Array) -> str:
    """sha256 of the sorted ids, each followed by a newline: identifies a pool's content listing.
    An Arrow array is hashed from its buffers, a chunk at a time (no Python string per id)."""
    h = hashlib.sha256()
    if isinstance(ids, (pa.Array, pa.ChunkedArray)):
        arr = ids.combine_chunks() if isinstance(ids, pa.ChunkedArray) else ids
        for start in range(0, len(arr), _DIGEST_CHUNK):
            nl = pa.scalar("\n", pa.large_string())
            joined = pc.binary_join_element_wise(arr.slice(start, _DIGEST_CHUNK).cast(pa.large_string()), nl,
                                                 pa.scalar("", pa.large_string()))
            offsets = np.frombuffer(joined.buffers()[1], np.int64)[joined.offset:joined.offset + len(joined) + 1]
            h.update(memoryview(joined.buffers()[2])[int(offsets[0]):int(offsets[-1])])
        return h.hexdigest()
    for i in ids:
        h.update(i.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def save_ids(out_dir: str | Path, ids: pa.Array) -> None:
    """Keep the scan's sorted ids beside the manifest (written once, atomically)."""
    path = ScanLayout(out_dir).root / IDS_FILE
    write_atomic(path, lambda tmp: pq.write_table(pa.table({"id": ids}), tmp, compression="zstd"))


def stored_ids(out_dir: str | Path, manifest: dict | None, source: Any) -> pa.Array | None:
    """The ids a scan folder recorded for `source`, when it is the same source with the same content stamp
    (`describe()` and `fingerprint()` unchanged) and the stored ids match the manifest; else None (list the pool)."""
    path = ScanLayout(out_dir).root / IDS_FILE
    if manifest is None or not path.exists() or not hasattr(source, "fingerprint") or not hasattr(source, "describe"):
        return None
    stamp = source.fingerprint()
    if stamp is None or manifest.get("pool_fingerprint") != stamp or manifest.get("pool_source") != source.describe():
        return None
    ids = pq.read_table(path).column("id").combine_chunks()
    if len(ids) != manifest.get("n_images") or ids_digest(ids) != manifest.get("ids_sha256"):
        return None
    return ids


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


def scan_pool_source(manifest: dict, pool_root: str | Path | None = None) -> Any:
    """Where a scan's images are read back from (galleries, reports): `pool_root` when given (a folder), else
    the scan's own pool source reopened from `pool_source` (an object store or shards; credentials from the
    environment), else the folder `pool_root` the manifest names."""
    if pool_root is not None:
        return Path(pool_root)
    source = manifest.get("pool_source")
    if isinstance(source, dict) and source.get("format") not in (None, "folder"):
        return open_pool(**source)
    return Path(manifest["pool_root"])
