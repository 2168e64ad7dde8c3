"""Reading a scan folder back as one score table (see `blindspots.scan.schema` for the columns).

The layout of a scan folder is in `blindspots.scan.layout`, the manifest in
`blindspots.scan.manifest`, the shard writers in `blindspots.scan.shards`. Keeping each model's
columns in its own shards is what lets a new target reuse the competitors' columns
(Algorithm 1: competitors are run once, line 3; each new target only once, line 7).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Sequence

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from blindspots.scan import schema
# Re-exported: these names lived here before the split and are imported from here elsewhere.
from blindspots.scan.layout import MANIFEST, ScanLayout, find_map, shard_file
from blindspots.scan.manifest import (
    SCAN_VERSION, ids_digest, load_manifest, merge_manifest, save_manifest,
)
from blindspots.scan.plan import num_shards
from blindspots.scan.schema import MODEL_NAME, check_model_name
from blindspots.scan.shards import meta_table, model_table, pair_table, write_shard

__all__ = ["MANIFEST", "MODEL_NAME", "SCAN_VERSION", "ScanLayout", "check_model_name", "find_map", "ids_digest",
           "load_manifest", "merge_manifest", "meta_table", "model_table", "num_shards", "pair_table",
           "read_score_table", "save_manifest", "shard_file", "write_shard"]

log = logging.getLogger(__name__)


def _read_part(paths: list[Path]) -> pa.Table:
    # promote: shards written before a column existed (content_hash, error__M) read as nulls
    return pa.concat_tables([pq.read_table(p) for p in paths], promote_options="default")


def read_score_table(out_dir: str | Path, *, target: str | None = None,
                     competitors: Sequence[str] | None = None, allow_partial: bool = False,
                     manifest: dict | None = None) -> pd.DataFrame:
    """The score table of a scan folder as one DataFrame, one row per image id, sorted by id.

    Columns (the scan contract, `blindspots.scan.schema`): id, status ('ok'|'error'), error, width,
    height (nullable Int32), content_hash (hex digest of the file's bytes; null for errors and for
    scans made before it existed); per model M: frac__M__k (float32, k = 0..C-1), entropy__M,
    maxprob__M (float32); per competitor G of the target T: dpa__T__G, dmiou__T__G (float64); then
    the columns of every complete extra part (`extra/<P>/`, e.g. surprise_mdsa__M; an extra part
    still being written is left out with a log message, never half-read).
    An image on which the target or one of the competitors failed has status 'error' and that
    model's message in `error`.
    target / competitors: default to the last scan's (scan.json); pass another target that
    was scanned into the folder to read its pairs.
    allow_partial: return only the shards complete for every part instead of raising.
    manifest: the folder's scan.json when the caller has read it already (read here otherwise).
    """
    layout = ScanLayout(out_dir)
    manifest = load_manifest(out_dir) if manifest is None else manifest
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
        return pd.DataFrame({schema.ID: pd.Series([], dtype=object)})
    tables = [_read_part([p[k] for k in complete]) for p in parts]
    ids = tables[0].column(schema.ID)
    for t in tables[1:]:
        if not t.column(schema.ID).equals(ids):
            raise ValueError("out_dir: expected shards with identical id order in every part, got a mismatch; "
                             "the scan folder is corrupt, re-run into a new out_dir")
    merged = tables[0]
    if schema.CONTENT_HASH not in merged.column_names:  # a scan made before the column existed
        merged = merged.append_column(schema.CONTENT_HASH, pa.nulls(len(merged), pa.string()))
    errors: dict[str, pa.ChunkedArray] = {}
    for t in tables[1:]:
        for name in t.column_names[1:]:
            if name.startswith("error" + schema.SEP):
                errors[name[len("error" + schema.SEP):]] = t.column(name)
            else:
                merged = merged.append_column(name, t.column(name))
    df = merged.to_pandas(types_mapper={pa.int32(): pd.Int32Dtype()}.get)
    for m in [target] + competitors:  # a model that failed on an image makes its row an error
        if m in errors:
            err = errors[m].to_pandas()
            hit = (df[schema.STATUS] == schema.STATUS_OK).to_numpy(bool) & err.notna().to_numpy(bool)
            df.loc[hit, schema.STATUS] = schema.STATUS_ERROR
            df.loc[hit, schema.ERROR] = err[hit].to_numpy(object)
    return df
