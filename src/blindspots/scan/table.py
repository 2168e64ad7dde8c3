"""The score table on disk: Parquet shards, the scan manifest, resume bookkeeping and reading.

Layout of a scan folder (`out_dir`)::

    scan.json                              manifest: pool, shard size, classes, models, target
    meta/shard-00000.parquet               id, status, error, width, height
    models/<M>/shard-00000.parquet         id, frac__<M>__<k> (k = 0..C-1), entropy__<M>, maxprob__<M>
    pairs/<T>__<G>/shard-00000.parquet     id, dpa__<T>__<G>, dmiou__<T>__<G>
    maps/<M>/<id>.png                      argmax map of model M (index PNG)
    extra/<P>/shard-00000.parquet          id, more float columns added after the scan (e.g. surprise
                                           columns, `blindspots.scan.extra.add_columns`)

Shard k holds the rows of ids[k*S:(k+1)*S] of the sorted pool ids (S = shard size), in id
order. Each shard file is written atomically (temporary file + os.replace) once all its rows
and maps exist, so an existing shard file is always complete: resuming skips it. Keeping each
model's columns in its own shards is what lets a new target reuse the competitors' columns
(Algorithm 1: competitors are run once, line 3; each new target only once, line 7).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

log = logging.getLogger(__name__)

SCAN_VERSION = 1
MANIFEST = "scan.json"
MODEL_NAME = re.compile(r"^[a-z0-9]+(?:_[a-z0-9]+)*$")  # contract [a-z0-9_]+, minus "__" (the column separator)


def check_model_name(name: str, arg: str = "models") -> str:
    """ValueError unless `name` matches [a-z0-9_]+ without leading/trailing/double underscores."""
    if not isinstance(name, str) or not MODEL_NAME.match(name):
        raise ValueError(f"{arg}: expected model names of lowercase letters, digits and single underscores "
                         f"(e.g. 'deeplab_r50'), got {name!r}")
    return name


def shard_file(k: int) -> str:
    return f"shard-{k:05d}.parquet"


def num_shards(n_ids: int, shard_size: int) -> int:
    return (n_ids + shard_size - 1) // shard_size


def ids_digest(ids: Sequence[str]) -> str:
    """sha256 of the sorted id list: identifies a pool's content listing."""
    h = hashlib.sha256()
    for i in ids:
        h.update(i.encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


class ScanLayout:
    """Paths inside a scan folder."""

    def __init__(self, out_dir: str | Path) -> None:
        self.root = Path(out_dir)

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST

    def meta_shard(self, k: int) -> Path:
        return self.root / "meta" / shard_file(k)

    def model_shard(self, model: str, k: int) -> Path:
        return self.root / "models" / model / shard_file(k)

    def pair_shard(self, target: str, competitor: str, k: int) -> Path:
        return self.root / "pairs" / f"{target}__{competitor}" / shard_file(k)

    def extra_shard(self, part: str, k: int) -> Path:
        return self.root / "extra" / part / shard_file(k)

    def extra_parts(self) -> list[str]:
        """Names of the extra column parts present (complete or not), sorted."""
        root = self.root / "extra"
        return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []

    def map_path(self, model: str, image_id: str) -> Path:
        return self.root / "maps" / model / (image_id + ".png")


def write_atomic(path: Path, write: Any) -> None:
    """Call write(tmp_path), then move tmp_path onto `path` (readers never see a partial file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_shard(path: Path, table: pa.Table) -> None:
    """Write one Parquet shard atomically."""
    write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def load_manifest(out_dir: str | Path) -> dict | None:
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


# Settings that must match for a scan folder to be resumed / extended.
_FIXED = ("version", "ids_sha256", "n_images", "shard_size", "num_classes", "resize", "save_maps")


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
        models[name] = info if not before else {**before, **{k: v for k, v in info.items() if v is not None}}
    return {**old, **new, "models": models}


# --- shard schemas ---------------------------------------------------------------------------

def meta_table(ids: Sequence[str], status: Sequence[str], error: Sequence[str | None],
               width: Sequence[int | None], height: Sequence[int | None]) -> pa.Table:
    return pa.table({
        "id": pa.array(list(ids), pa.string()),
        "status": pa.array(list(status), pa.string()),
        "error": pa.array(list(error), pa.string()),
        "width": pa.array(list(width), pa.int32()),
        "height": pa.array(list(height), pa.int32()),
    })


def model_table(model: str, ids: Sequence[str], frac: np.ndarray, entropy: np.ndarray,
                maxprob: np.ndarray) -> pa.Table:
    """frac: float32 [N, C]; entropy, maxprob: float32 [N] (NaN rows for undecodable images)."""
    cols: dict[str, pa.Array] = {"id": pa.array(list(ids), pa.string())}
    for k in range(frac.shape[1]):
        cols[f"frac__{model}__{k}"] = pa.array(frac[:, k].astype(np.float32))
    cols[f"entropy__{model}"] = pa.array(entropy.astype(np.float32))
    cols[f"maxprob__{model}"] = pa.array(maxprob.astype(np.float32))
    return pa.table(cols)


def pair_table(target: str, competitor: str, ids: Sequence[str], dpa: np.ndarray, dmiou: np.ndarray) -> pa.Table:
    """dpa, dmiou: float64 [N] (NaN rows for undecodable images)."""
    return pa.table({
        "id": pa.array(list(ids), pa.string()),
        f"dpa__{target}__{competitor}": pa.array(dpa.astype(np.float64)),
        f"dmiou__{target}__{competitor}": pa.array(dmiou.astype(np.float64)),
    })


# --- reading ---------------------------------------------------------------------------------

def _read_part(paths: list[Path]) -> pa.Table:
    return pa.concat_tables([pq.read_table(p) for p in paths])


def read_score_table(out_dir: str | Path, *, target: str | None = None,
                     competitors: Sequence[str] | None = None, allow_partial: bool = False) -> pd.DataFrame:
    """The score table of a scan folder as one DataFrame, one row per image id, sorted by id.

    Columns (the scan contract): id, status ('ok'|'error'), error, width, height (nullable
    Int32); per model M: frac__M__k (float32, k = 0..C-1), entropy__M, maxprob__M (float32);
    per competitor G of the target T: dpa__T__G, dmiou__T__G (float64); then the columns of every
    complete extra part (`extra/<P>/`, e.g. surprise_mdsa__M; an extra part still being written
    is left out with a log message, never half-read).
    target / competitors: default to the last scan's (scan.json); pass another target that
    was scanned into the folder to read its pairs.
    allow_partial: return only the shards complete for every part instead of raising.
    """
    layout = ScanLayout(out_dir)
    manifest = load_manifest(out_dir)
    if manifest is None:
        raise ValueError(f"out_dir: expected a scan folder with {MANIFEST}, got {str(out_dir)!r}")
    if target is None:
        target = manifest["target"]
        competitors = manifest["competitors"] if competitors is None else competitors
    elif target not in manifest["models"]:
        raise ValueError(f"target: expected one of the scanned models {sorted(manifest['models'])}, got {target!r}")
    elif competitors is None:  # another target scanned earlier: the competitors it has pairs with
        competitors = [m for m in manifest["models"] if m != target and layout.pair_shard(target, m, 0).exists()]
    competitors = list(competitors)
    n = manifest["n_shards"]
    parts: list[list[Path]] = [[layout.meta_shard(k) for k in range(n)]]
    parts += [[layout.model_shard(m, k) for k in range(n)] for m in manifest["models"]]
    parts += [[layout.pair_shard(target, g, k) for k in range(n)] for g in competitors]
    for part in layout.extra_parts():
        files = [layout.extra_shard(part, k) for k in range(n)]
        if all(f.exists() for f in files):
            parts.append(files)
        else:
            log.info("extra column part %r is incomplete (%d of %d shards); not read", part,
                     sum(f.exists() for f in files), n)
    complete = [k for k in range(n) if all(p[k].exists() for p in parts)]
    if len(complete) < n and not allow_partial:
        missing = next(p[k] for k in range(n) for p in parts if not p[k].exists())
        raise ValueError(f"out_dir: expected a complete scan ({n} shards per part), got {len(complete)} complete "
                         f"shards (first missing: {missing.relative_to(layout.root)}); re-run the scan to finish it")
    if not complete:
        return pd.DataFrame({"id": pd.Series([], dtype=object)})
    tables = [_read_part([p[k] for k in complete]) for p in parts]
    ids = tables[0].column("id")
    for t in tables[1:]:
        if not t.column("id").equals(ids):
            raise ValueError("out_dir: expected shards with identical id order in every part, got a mismatch; "
                             "the scan folder is corrupt, re-run into a new out_dir")
    merged = tables[0]
    for t in tables[1:]:
        for name in t.column_names[1:]:
            merged = merged.append_column(name, t.column(name))
    return merged.to_pandas(types_mapper={pa.int32(): pd.Int32Dtype()}.get)
