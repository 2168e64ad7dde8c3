"""Parquet shards of the score table: one pyarrow table per (part, shard), written atomically.

Each shard file is written (temporary file + os.replace) once all its rows and maps exist, so
an existing shard file is always complete: resuming skips it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from blindspots.scan import schema
from blindspots.atomic import write_atomic


def write_shard(path: Path, table: pa.Table) -> None:
    """Write one Parquet shard atomically."""
    write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))


def meta_table(ids: Sequence[str], status: Sequence[str], error: Sequence[str | None],
               width: Sequence[int | None], height: Sequence[int | None],
               content_hash: Sequence[str | None] | None = None) -> pa.Table:
    """One row per id: status 'ok'|'error', the error's reason, original size, file content hash."""
    hashes = [None] * len(ids) if content_hash is None else list(content_hash)
    return pa.table({
        schema.ID: pa.array(list(ids), pa.string()),
        schema.STATUS: pa.array(list(status), pa.string()),
        schema.ERROR: pa.array(list(error), pa.string()),
        schema.WIDTH: pa.array(list(width), pa.int32()),
        schema.HEIGHT: pa.array(list(height), pa.int32()),
        schema.CONTENT_HASH: pa.array(hashes, pa.string()),
    })


def model_table(model: str, ids: Sequence[str], frac: np.ndarray, entropy: np.ndarray,
                maxprob: np.ndarray, errors: Sequence[str | None] | None = None) -> pa.Table:
    """frac: float32 [N, C]; entropy, maxprob: float32 [N] (NaN rows where the model has no output);
    errors: why the model failed on each image (None where it did not)."""
    cols: dict[str, pa.Array] = {schema.ID: pa.array(list(ids), pa.string())}
    for k in range(frac.shape[1]):
        cols[schema.frac(model, k)] = pa.array(frac[:, k].astype(np.float32))
    cols[schema.entropy(model)] = pa.array(entropy.astype(np.float32))
    cols[schema.maxprob(model)] = pa.array(maxprob.astype(np.float32))
    cols[schema.model_error(model)] = pa.array([None] * len(ids) if errors is None else list(errors), pa.string())
    return pa.table(cols)


def pair_table(target: str, competitor: str, ids: Sequence[str], dpa: np.ndarray, dmiou: np.ndarray) -> pa.Table:
    """dpa, dmiou: float64 [N] (NaN rows where either map is missing)."""
    return pa.table({
        schema.ID: pa.array(list(ids), pa.string()),
        schema.dpa(target, competitor): pa.array(dpa.astype(np.float64)),
        schema.dmiou(target, competitor): pa.array(dmiou.astype(np.float64)),
    })
