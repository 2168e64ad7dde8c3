"""The writer side of a scan, shared by both engines: a shard's rows are filled batch by batch
(`add_batch`, `add_errors`), each model's argmax maps saved as index PNGs (`scan.maps`), and the
finished shard's Parquet files written (`finish_shard`) with the writers of `scan.shards`.

The local engine runs this on its writer thread; the Ray engine on the driver, as the actors'
results come back. So the files a scan leaves do not depend on the engine.
"""
from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field

import numpy as np
import pyarrow.parquet as pq

from blindspots.scan import maps as map_files
from blindspots.scan import schema
from blindspots.scan.engines.forward import BatchResult, distances
from blindspots.scan.engines.job import ScanJob
from blindspots.scan.engines.pipeline import Errors
from blindspots.scan.layout import ScanLayout
from blindspots.scan.plan import ShardPlan
from blindspots.scan.shards import meta_table, model_table, pair_table, write_shard


@dataclass
class ShardRows:
    """Rows of one shard, filled batch by batch, keyed by id (one thread only)."""

    status: dict[str, tuple[str, str | None, int | None, int | None, str | None]] = field(default_factory=dict)
    models: dict[str, dict[str, tuple[np.ndarray, float, float]]] = field(default_factory=dict)
    errors: dict[str, dict[str, str]] = field(default_factory=dict)  # model -> id -> message
    pairs: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    disk: dict[str, set[str]] = field(default_factory=dict)  # model -> ids with a saved map (read once)
    map_writes: list[Future] = field(default_factory=list)  # map PNGs being written by the job's map pool


def add_errors(msg: Errors, shard: ShardRows) -> None:
    """Error rows for the ids of a shard that could not be decoded."""
    for image_id, reason in msg.items:
        shard.status[image_id] = (schema.STATUS_ERROR, reason, None, None, None)


def add_batch(res: BatchResult, plan: ShardPlan, shard: ShardRows, job: ScanJob) -> None:
    """A batch's statistics, maps and pair distances into its shard's rows; saves the maps.

    Pairs that `forward.batch_result` left out (one map saved by an earlier run) are computed
    here from the saved maps."""
    layout, target, num_classes = job.layout, job.target, job.num_classes
    ids = res.ids
    if res.decoded:
        for image_id, (h, w), digest in zip(ids, res.sizes, res.hashes):
            shard.status[image_id] = (schema.STATUS_OK, None, w, h, digest)
    for name, errs in res.errors.items():
        shard.errors.setdefault(name, {}).update(errs)
    for name, mr in res.models.items():
        table = shard.models.setdefault(name, {})
        for j, image_id in enumerate(mr.ids):
            table[image_id] = (mr.frac[j], float(mr.entropy[j]), float(mr.maxprob[j]))
        if job.save_maps and not layout.model_shard(name, plan.k).exists():
            if mr.pngs is not None:
                map_files.write_pngs(layout, name, mr.ids, mr.pngs)
            elif job.map_pool is not None:  # encoded and written off this thread; awaited by finish_shard
                shard.map_writes.append(job.map_pool.submit(map_files.save_maps, layout, name, mr.ids, mr.argmax))
            else:
                map_files.save_maps(layout, name, mr.ids, mr.argmax)
    for g, vals in res.pairs.items():
        shard.pairs.setdefault(g, {}).update(vals)
    left = [g for g in plan.pairs if g not in res.pairs]
    if not left:
        return
    maps: dict[str, dict[str, np.ndarray]] = {name: dict(zip(mr.ids, mr.argmax)) for name, mr in res.models.items()}
    for name in [target] + left:
        if name not in maps and name not in plan.run:  # finished earlier: read its saved maps back
            have = _saved(layout, shard, name, plan.k)
            want = [i for i in ids if i in have]
            maps[name] = dict(zip(want, map_files.load_maps(layout, name, want)))
    for g in left:
        table = shard.pairs.setdefault(g, {})
        a, b = maps.get(target, {}), maps.get(g, {})
        both = [i for i in ids if i in a and i in b]
        for image_id, d in zip(both, distances([a[i] for i in both], [b[i] for i in both], num_classes)):
            table[image_id] = d


def _saved(layout: ScanLayout, shard: ShardRows, model: str, k: int) -> set[str]:
    """Ids of shard k that have a saved map of `model` (finished shard): decoded and no model error."""
    if model not in shard.disk:
        if layout.meta_shard(k).exists():
            meta = pq.read_table(layout.meta_shard(k), columns=[schema.ID, schema.STATUS])
            status = zip(meta.column(schema.ID).to_pylist(), meta.column(schema.STATUS).to_pylist())
        else:  # decoded in this run
            status = ((i, s[0]) for i, s in shard.status.items())
        ok = {i for i, s in status if s == schema.STATUS_OK}
        path = layout.model_shard(model, k)
        names = pq.read_schema(path).names
        if schema.model_error(model) in names:
            t = pq.read_table(path, columns=[schema.ID, schema.model_error(model)])
            ok -= {i for i, e in zip(t.column(0).to_pylist(), t.column(1).to_pylist()) if e is not None}
        shard.disk[model] = ok
    return shard.disk[model]


def finish_shard(plan: ShardPlan, shard: ShardRows, job: ScanJob) -> None:
    """Write the shard's Parquet files once its maps are on disk (saved, or being saved by the job's
    map pool, by `add_batch` before): a shard file on disk implies its maps exist (resume)."""
    for pending in shard.map_writes:
        pending.result()  # re-raises a failed write: the shard is then not written
    shard.map_writes.clear()
    layout, target, num_classes = job.layout, job.target, job.num_classes
    ids = plan.ids
    if plan.need_meta:
        missing = [i for i in ids if i not in shard.status]
        if missing:
            raise RuntimeError(f"scan: shard {plan.k} ended without rows for {missing[:3]}")
        st = [shard.status[i] for i in ids]
        write_shard(layout.meta_shard(plan.k), meta_table(ids, *[[s[j] for s in st] for j in range(5)]))
    nan_frac = np.full(num_classes, np.nan, dtype=np.float32)
    for name in plan.run:
        path = layout.model_shard(name, plan.k)
        if path.exists():  # run only to recompute maps for a pair
            continue
        vals = shard.models.get(name, {})
        errs = shard.errors.get(name, {})
        got = [vals.get(i, (nan_frac, np.nan, np.nan)) for i in ids]
        write_shard(path, model_table(name, ids, np.stack([g[0] for g in got]),
                                      np.array([g[1] for g in got], np.float32),
                                      np.array([g[2] for g in got], np.float32), [errs.get(i) for i in ids]))
    for g in plan.pairs:
        vals = shard.pairs.get(g, {})
        got = [vals.get(i, (np.nan, np.nan)) for i in ids]
        write_shard(layout.pair_shard(target, g, plan.k),
                    pair_table(target, g, ids, np.array([x[0] for x in got]), np.array([x[1] for x in got])))
