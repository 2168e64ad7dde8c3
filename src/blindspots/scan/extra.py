"""Add columns to a finished scan: one more Parquet part, shard by shard, resumable.

Some scores need a pass over the images that the scan itself does not make — surprise adequacy
from a model's activation traces, for instance (`blindspots surprise score --scan`). `add_columns`
reads the images of each scan shard again, calls `compute` on same-size batches and writes
`extra/<part>/shard-k.parquet` with the shard's ids in scan order (NaN rows for images the scan
could not decode). `read_score_table` joins every complete part, so selection strategies see
the new columns like any other. Killed and started again, it computes only the missing shards.
"""
from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tqdm.auto import tqdm

from blindspots.batches import size_batches
from blindspots.scan.engines.pipeline import resize_image
from blindspots.scan.engines.ray import connect, import_ray
from blindspots.scan.layout import ScanLayout
from blindspots.scan.manifest import ids_digest, load_manifest
from blindspots.scan.plan import scan_ids
from blindspots.scan.schema import RESERVED, RESERVED_PREFIXES
from blindspots.scan.shards import write_shard

log = logging.getLogger(__name__)

PART_NAME = re.compile(r"^[a-z0-9_]+$")
Compute = Callable[[np.ndarray], dict[str, np.ndarray]]  # uint8 [n, H, W, 3] -> {column: float [n]}


def add_columns(out_dir: str | Path, pool: Any, part: str, compute: Compute, *, batch_size: int = 16,
                progress: bool = True, engine: str = "local", ray_address: str | None = None) -> list[str]:
    """Compute extra per-image columns for every image of a scan; returns the column names.

    out_dir: a finished scan folder. pool: the same `ImagePool` that was scanned (same ids).
    part: name of the column group (lowercase letters, digits, underscores), e.g. "surprise_mdsa__target".
    compute: images uint8 [n, H, W, 3] (resized as the scan resized them) -> dict of float arrays
        [n], the same keys on every call; keys must not clash with the scan's own columns.
    engine: "local" (this process) or "ray": one Ray task per missing shard (1 CPU each), `compute`
        and `pool` pickled once into Ray's object store (so `compute` must pickle: load models from
        specs on first call, not in the driver); the driver writes each shard as its task ends.
        ray_address: as for `scan_pool` (None: the Ray this process is connected to, or a new one).
    """
    if engine not in ("local", "ray"):
        raise ValueError(f"engine: expected 'local' or 'ray', got {engine!r}")
    layout = ScanLayout(out_dir)
    manifest = load_manifest(out_dir)
    if manifest is None:
        raise ValueError(f"out_dir: expected a scan folder with scan.json, got {str(out_dir)!r}")
    if not isinstance(part, str) or not PART_NAME.match(part):
        raise ValueError(f"part: expected a name of lowercase letters, digits and underscores, got {part!r}")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size}")
    ids = scan_ids(pool)
    if ids_digest(ids) != manifest["ids_sha256"]:
        raise ValueError(f"pool: expected the pool that was scanned into {str(out_dir)!r} "
                         f"({manifest['n_images']} images), got a different id list ({len(ids)} images)")
    size, n_shards = int(manifest["shard_size"]), int(manifest["n_shards"])
    resize = tuple(manifest["resize"]) if manifest.get("resize") else None
    todo = [k for k in range(n_shards) if not layout.extra_shard(part, k).exists()]
    columns: list[str] | None = _existing_columns(layout, part, n_shards)
    with tqdm(total=len(ids), initial=len(ids) - sum(len(ids[k * size:(k + 1) * size]) for k in todo),
              unit="img", desc=f"extra columns {part}", disable=not progress) as bar:
        postponed: list[int] = []  # shards without one readable image, met before the columns are known
        if engine == "ray":
            shards = _ray_shards(pool, [(k, ids[k * size:(k + 1) * size]) for k in todo], compute, int(batch_size),
                                 resize, ray_address)
        else:
            shards = ((k, *_shard_values(pool, ids[k * size:(k + 1) * size], compute, int(batch_size), resize,
                                         columns, bar)) for k in todo)
        for k, values, got in shards:
            if engine == "ray":
                bar.update(len(ids[k * size:(k + 1) * size]))
            if values is None:
                postponed.append(k)
                continue
            if columns is not None and got != columns:  # a Ray task learnt its columns on its own
                raise ValueError(f"compute: expected the columns {columns} on every call, got {got}")
            columns = got
            _write(layout, part, k, ids[k * size:(k + 1) * size], values)
        if postponed and columns is None:
            raise ValueError("pool: expected at least one decodable image to learn the columns from, got none")
        for k in postponed:  # all rows NaN
            shard_ids = ids[k * size:(k + 1) * size]
            _write(layout, part, k, shard_ids, {c: np.full(len(shard_ids), np.nan, np.float32) for c in columns})
    return list(columns or [])


def claim_part(folder: Path, settings: dict, record: str, argument: str) -> None:
    """Record in `folder/record` (JSON) what fills an extra part, or check it against the record there.

    `add_columns` resumes a part by its name only, so filling it with another model or other settings
    would keep the old shards beside new ones: a ValueError naming `argument` and the settings that
    differ (old, new). A part written before records existed (shards, no record) is not checked.
    """
    path = Path(folder) / record
    if path.is_file():
        old = json.loads(path.read_text())
        if old != settings:
            diff = {k: (old.get(k), v) for k, v in settings.items() if old.get(k) != v}
            raise ValueError(f"{argument}: expected the settings that filled {str(folder)!r} to resume it, got "
                             f"others {diff} (old, new); pass another {argument} or delete that folder")
        return
    if Path(folder).is_dir() and any(Path(folder).glob("*.parquet")):
        return
    Path(folder).mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(settings, indent=1))


class _NoBar:
    def update(self, n: int) -> None:
        pass


def _shard_task(pool: Any, shard_ids: list[str], compute: Compute, batch_size: int,
                resize: tuple[int, int] | None) -> tuple[dict[str, np.ndarray] | None, list[str] | None]:
    """A Ray task: one shard's column values and names (`_shard_values`, columns learnt here)."""
    return _shard_values(pool, shard_ids, compute, batch_size, resize, None, _NoBar())


def _ray_shards(pool: Any, shards: list[tuple[int, list[str]]], compute: Compute, batch_size: int,
                resize: tuple[int, int] | None, address: str | None
                ) -> Iterator[tuple[int, dict[str, np.ndarray] | None, list[str] | None]]:
    """(k, values, columns) per shard, in the order the Ray tasks end (one task per shard)."""
    ray = import_ray()
    started = connect(ray, address)
    try:
        task = ray.remote(num_cpus=1)(_shard_task)
        pool_ref, compute_ref = ray.put(pool), ray.put(compute)  # pickled once, not per task
        pending = {task.remote(pool_ref, shard_ids, compute_ref, batch_size, resize): k for k, shard_ids in shards}
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            k = pending.pop(ready[0])
            yield (k, *ray.get(ready[0]))
    finally:
        if started:
            ray.shutdown()


def _write(layout: ScanLayout, part: str, k: int, shard_ids: list[str], values: dict[str, np.ndarray]) -> None:
    table = pa.table({"id": pa.array(shard_ids, pa.string()), **{c: pa.array(v) for c, v in values.items()}})
    write_shard(layout.extra_shard(part, k), table)


def _existing_columns(layout: ScanLayout, part: str, n_shards: int) -> list[str] | None:
    for k in range(n_shards):
        path = layout.extra_shard(part, k)
        if path.exists():
            return [c for c in pq.read_schema(path).names if c != "id"]
    return None


def _shard_values(pool: Any, shard_ids: list[str], compute: Compute, batch_size: int,
                  resize: tuple[int, int] | None, columns: list[str] | None, bar: Any
                  ) -> tuple[dict[str, np.ndarray] | None, list[str] | None]:
    """Column values float32 [len(shard_ids)] of one shard (NaN for undecodable images), and the
    column names; (None, None) when no image is readable and no columns are known yet."""
    pos = {image_id: i for i, image_id in enumerate(shard_ids)}
    values: dict[str, np.ndarray] = {}

    def flush(group: list[tuple[str, np.ndarray]]) -> None:
        nonlocal columns
        out = compute(np.stack([g[1] for g in group]))
        if not isinstance(out, dict) or not out:
            raise ValueError(f"compute: expected a non-empty dict of column -> array, got {type(out).__name__}")
        if columns is None:
            clash = [c for c in out if c in RESERVED or c.startswith(RESERVED_PREFIXES)]
            if clash:
                raise ValueError(f"compute: expected new column names, got names of the scan's own columns {clash}")
            columns = sorted(out)
        if sorted(out) != columns:
            raise ValueError(f"compute: expected the columns {columns} on every call, got {sorted(out)}")
        for c in columns:
            v = np.asarray(out[c], dtype=np.float64)
            if v.shape != (len(group),):
                raise ValueError(f"compute: expected column {c!r} of shape ({len(group)},), got {v.shape}")
            col = values.setdefault(c, np.full(len(shard_ids), np.nan))
            col[[pos[g[0]] for g in group]] = v
        bar.update(len(group))

    def readable() -> Iterator[tuple[str, np.ndarray]]:
        for item in pool.iter_items(shard_ids):
            if item.image is None:
                bar.update(1)
                continue
            image = item.image
            if resize is not None and tuple(image.shape[:2]) != resize:
                image = resize_image(image, resize)
            yield item.id, image

    for group in size_batches(readable(), lambda g: g[1].shape, max_images=batch_size):
        flush(group)
    if columns is None:  # not one readable image in this shard, and none computed before
        return None, None
    for c in columns:
        values.setdefault(c, np.full(len(shard_ids), np.nan))
    return {c: values[c].astype(np.float32) for c in columns}, columns
