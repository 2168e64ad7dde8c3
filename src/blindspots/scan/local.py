"""The local scan engine: stream a pool once through a target and m competitors.

Pipeline (three threads, bounded queues, so decoding, inference and bookkeeping overlap):
  reader  — decodes the images of unfinished shards ahead of time and groups them into batches
            of one image size (pools with varied sizes are batched per size; or pass `resize`);
  main    — runs each model's `predict_proba` on a batch, nothing else;
  writer  — computes the statistics and pair distances (`scan.stats`), saves the argmax maps as
            index PNGs, then writes the finished shard's Parquet files, in order (so a shard file
            on disk implies its maps exist).
Killed at any moment and started again, the scan redoes only the unfinished shards and ends
with the same table as an uninterrupted run.
"""
from __future__ import annotations

import logging
import queue
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from tqdm.auto import tqdm

from blindspots.data.classes import Classes
from blindspots.scan.fingerprint import model_fingerprint
from blindspots.scan import maps as map_files
from blindspots.scan.pipeline import DONE, Batch, Errors, Worker, read_batches, run_jobs, submit
from blindspots.scan.stats import model_stats, pair_distances
from blindspots.scan.table import (
    SCAN_VERSION,
    ScanLayout,
    check_model_name,
    ids_digest,
    load_manifest,
    merge_manifest,
    meta_table,
    model_table,
    num_shards,
    pair_table,
    save_manifest,
    write_shard,
)

log = logging.getLogger(__name__)

# GIL hand-over interval during a scan. The forward passes on the main thread release and retake the
# GIL around every torch op; with Python's default 5 ms, each time the reader or writer thread is
# running Python code the main thread waits up to 5 ms for it. Measured: a busy pure-Python thread
# slows a 1-thread forward 4.5x at 5 ms, 1.16x at 0.2 ms, not at all at 0.05 ms.
SCAN_SWITCH_INTERVAL_S = 5e-5


@dataclass
class _ShardPlan:
    """What is missing for shard k."""

    k: int
    ids: list[str]
    need_meta: bool
    run: list[str]  # models to run on the images
    pairs: list[str]  # competitors whose (target, competitor) pair shard is missing

    @property
    def needs_images(self) -> bool:
        return self.need_meta or bool(self.run)


@dataclass
class _ShardRows:
    """Rows of one shard, filled batch by batch, keyed by id."""

    status: dict[str, tuple[str, str | None, int | None, int | None]] = field(default_factory=dict)
    models: dict[str, dict[str, tuple[np.ndarray, float, float]]] = field(default_factory=dict)
    pairs: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)


def _validate(pool: Any, models: Mapping[str, Any], target: str, competitors: Sequence[str] | None,
              batch_size: int, shard_size: int, resize: tuple[int, int] | None, manifest: dict | None) -> list[str]:
    for attr in ("ids", "iter_items", "root"):
        if not hasattr(pool, attr):
            raise ValueError(f"pool: expected an ImagePool (with .ids, .iter_items, .root), got {type(pool).__name__}")
    if not isinstance(models, Mapping) or not models:
        raise ValueError(f"models: expected a non-empty dict name -> Segmenter, got {models!r}")
    for name, m in models.items():
        check_model_name(name)
        if not (hasattr(m, "predict_proba") or hasattr(m, "predict_proba_ids")) or not hasattr(m, "num_classes"):
            raise ValueError(f"models[{name!r}]: expected a Segmenter (num_classes, predict_proba), "
                             f"got {type(m).__name__}")
        if resize is not None and hasattr(m, "predict_proba_ids"):
            raise ValueError(f"resize: expected None when a model reads precomputed probabilities "
                             f"({name!r}), got {resize}")
    sizes = {name: int(m.num_classes) for name, m in models.items()}
    if len(set(sizes.values())) != 1:
        raise ValueError(f"models: expected one label space (equal num_classes), got {sizes}")
    check_model_name(target, "target")
    if target not in models:
        raise ValueError(f"target: expected one of the given models {sorted(models)}, got {target!r}")
    known = set(models) | set((manifest or {}).get("models", {}))
    comps = [m for m in models if m != target] if competitors is None else list(competitors)
    for g in comps:
        check_model_name(g, "competitors")
        if g == target or g not in known:
            raise ValueError(f"competitors: expected names of other models given or already scanned into "
                             f"out_dir {sorted(known - {target})}, got {g!r}")
    if not comps:
        log.warning("scan without competitors: only per-model statistics, no pair distances")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size: expected a positive integer, got {batch_size}")
    if int(shard_size) < 1:
        raise ValueError(f"shard_size: expected a positive integer, got {shard_size}")
    if resize is not None and (len(resize) != 2 or min(resize) < 1):
        raise ValueError(f"resize: expected (height, width) of positive integers or None, got {resize}")
    return comps


def scan_pool(
    pool: Any,
    models: Mapping[str, Any],
    out_dir: str | Path,
    *,
    target: str,
    competitors: Sequence[str] | None = None,
    batch_size: int = 16,
    shard_size: int = 256,
    save_maps: bool = True,
    resize: tuple[int, int] | None = None,
    classes: Classes | None = None,
    prefetch: int = 4,
    progress: bool = True,
) -> Path:
    """Stream `pool` once through the target and its competitors; write the score table.

    pool: an `ImagePool` (or any object with sorted `.ids`, `.iter_items(ids)` and `.root`).
    models: name -> Segmenter (`predict_proba(uint8 [N, H, W, 3]) -> float32 [N, C, H, W]`, or a
        precomputed model with `predict_proba_ids(ids)`); names match [a-z0-9_]+ (no "__").
    target: the model under test, T. competitors: the models it is compared with, G_1..G_m
        (default: every other model in `models`). A competitor already scanned into `out_dir`
        may be named without passing the model: its columns and saved maps are reused
        (Algorithm 1: competitors are run once, line 3; a new target only once, line 7).
    batch_size: images per forward pass; batches hold images of one size (varied pools are
        grouped per size within a shard). shard_size: images per Parquet shard (resume unit).
    save_maps: write each model's argmax map as an index PNG `out_dir/maps/<M>/<id>.png`.
    resize: (height, width) to resize every image to before inference (maps are at that size;
        width/height columns keep the original size). None: native size.
    classes: the label space recorded in scan.json (default: the target's `.classes` if any).
    Returns out_dir. See `blindspots.scan.table` for the layout and `read_score_table`.
    """
    out = Path(out_dir)
    old = load_manifest(out)
    comps = _validate(pool, models, target, competitors, batch_size, shard_size, resize, old)
    ids = sorted(pool.ids)
    if not ids:
        raise ValueError(f"pool: expected at least one image, got an empty pool at {pool.root}")
    num_classes = int(next(iter(models.values())).num_classes)
    classes = classes or getattr(models[target], "classes", None) or \
        Classes(tuple(f"class_{k}" for k in range(num_classes)))
    if classes.num_classes != num_classes:
        raise ValueError(f"classes: expected {num_classes} classes (the models' num_classes), "
                         f"got {classes.num_classes}")
    manifest = merge_manifest(old, {
        "version": SCAN_VERSION, "pool_root": str(Path(pool.root).resolve()), "n_images": len(ids),
        "ids_sha256": ids_digest(ids), "shard_size": int(shard_size), "n_shards": num_shards(len(ids), shard_size),
        "num_classes": num_classes, "classes": classes.to_dict(), "save_maps": bool(save_maps),
        "resize": list(resize) if resize else None, "target": target, "competitors": comps,
        "models": {name: {"kind": type(m).__name__, "fingerprint": model_fingerprint(m)} for name, m in models.items()},
    })
    layout = ScanLayout(out)
    plans = _plan(layout, ids, int(shard_size), models, target, comps, manifest, save_maps)
    save_manifest(out, manifest)
    todo = [p for p in plans if p.need_meta or p.run or p.pairs]
    done_images = len(ids) - sum(len(p.ids) for p in todo)
    log.info("scan %s: %d of %d shards to do", out, len(todo), len(plans))
    with tqdm(total=len(ids), initial=done_images, unit="img", desc=f"scan {target}", disable=not progress) as bar:
        _run(pool, models, layout, todo, target, num_classes, int(batch_size), resize, save_maps,
             max(1, int(prefetch)), bar)
    return out


def _plan(layout: ScanLayout, ids: list[str], shard_size: int, models: Mapping[str, Any], target: str,
          comps: list[str], manifest: dict, save_maps: bool) -> list[_ShardPlan]:
    plans = []
    for k in range(manifest["n_shards"]):
        shard_ids = ids[k * shard_size:(k + 1) * shard_size]
        run = [m for m in models if not layout.model_shard(m, k).exists()]
        pairs = [g for g in comps if not layout.pair_shard(target, g, k).exists()]
        # Pairs against maps that are neither computed now nor saved need the model run again.
        for m in [target] + pairs if pairs else []:
            if m not in run and not save_maps:
                if m not in models:
                    raise ValueError(f"competitors: {m!r} has no saved maps in out_dir (save_maps=False) and no "
                                     f"model was given to recompute them; pass it in models")
                run.append(m)
        for m in [target] + pairs if pairs else []:
            if m not in run and m not in models and not layout.model_shard(m, k).exists():
                raise ValueError(f"competitors: {m!r} is not finished in out_dir (shard {k} missing) and no model "
                                 f"was given to compute it; pass it in models")
        plans.append(_ShardPlan(k, shard_ids, not layout.meta_shard(k).exists(), run, pairs))
    return plans


def _run(pool: Any, models: Mapping[str, Any], layout: ScanLayout, plans: list[_ShardPlan], target: str,
         num_classes: int, batch_size: int, resize: tuple[int, int] | None, save_maps: bool, prefetch: int,
         bar: Any) -> None:
    """Main thread: forward passes only. The writer thread gets each batch's probabilities and
    computes the statistics, saves the maps and writes finished shards, in order."""
    if not plans:
        return
    stop = threading.Event()
    batches: queue.Queue = queue.Queue(maxsize=prefetch)
    jobs: queue.Queue = queue.Queue(maxsize=2)  # a job holds a batch's probabilities: keep few in flight
    reader = Worker(lambda: read_batches(pool, plans, batch_size, resize, batches, stop), "blindspots-scan-reader")
    writer = Worker(lambda: run_jobs(jobs), "blindspots-scan-writer")
    reader.start()
    writer.start()
    by_k = {p.k: p for p in plans}
    rows: dict[int, _ShardRows] = {}  # touched by the writer thread only
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(min(old_interval, SCAN_SWITCH_INTERVAL_S))
    try:
        while True:
            try:
                msg = batches.get(timeout=0.5)
            except queue.Empty:
                if reader.error:
                    raise reader.error
                if not reader.is_alive() and batches.empty():
                    raise RuntimeError("scan reader stopped without finishing")
                continue
            if msg is DONE:
                break
            plan = by_k[msg.k]
            shard = rows.setdefault(msg.k, _ShardRows())
            if isinstance(msg, Errors):
                submit(jobs, lambda msg=msg, shard=shard: _error_rows(msg, shard), writer)
                bar.update(len(msg.items))
            elif isinstance(msg, Batch):
                probas = _forward(msg, plan, models, num_classes)
                submit(jobs, lambda msg=msg, plan=plan, shard=shard, probas=probas: _batch_rows(
                    msg, plan, shard, probas, layout, target, num_classes, save_maps), writer)
                bar.update(len(msg.ids))
            else:  # EndShard
                submit(jobs, lambda plan=plan, shard=rows.pop(msg.k): _finish_shard(
                    plan, shard, layout, target, num_classes), writer)
    finally:
        stop.set()  # the reader stops early if we were interrupted
        # Let the writer finish what is queued (whole shards and their maps), then end it.
        while writer.is_alive():
            try:
                jobs.put(DONE, timeout=0.5)
                break
            except queue.Full:
                continue
        writer.join()
        reader.join(timeout=5)
        sys.setswitchinterval(old_interval)
    if writer.error:
        raise writer.error


def _forward(msg: Batch, plan: _ShardPlan, models: Mapping[str, Any], num_classes: int) -> dict[str, np.ndarray]:
    """Probabilities float32 [n, C, H, W] of each model that runs on this batch (main thread)."""
    if msg.images is None:
        return {}
    n, h, w = msg.images.shape[:3]
    out = {}
    for name in plan.run:
        model = models[name]
        if hasattr(model, "predict_proba_ids"):
            proba = model.predict_proba_ids(msg.ids, sizes=[(h, w)] * n)
        else:
            proba = model.predict_proba(msg.images)
        if proba.shape != (n, num_classes, h, w):
            raise ValueError(f"models[{name!r}]: expected probabilities of shape {(n, num_classes, h, w)}, "
                             f"got {proba.shape}")
        out[name] = proba
    return out


def _error_rows(msg: Errors, shard: _ShardRows) -> None:
    for image_id, reason in msg.items:
        shard.status[image_id] = ("error", reason, None, None)


def _batch_rows(msg: Batch, plan: _ShardPlan, shard: _ShardRows, probas: dict[str, np.ndarray],
                layout: ScanLayout, target: str, num_classes: int, save_maps: bool) -> None:
    """Writer thread: statistics, maps and pair distances of one batch into the shard's rows."""
    ids = msg.ids
    maps: dict[str, np.ndarray] = {}
    if msg.images is not None:
        for image_id, (h, w) in zip(ids, msg.sizes):
            shard.status[image_id] = ("ok", None, w, h)
    for name, proba in probas.items():
        st = model_stats(proba)
        maps[name] = st.argmax
        table = shard.models.setdefault(name, {})
        for i, image_id in enumerate(ids):
            table[image_id] = (st.frac[i], float(st.entropy[i]), float(st.maxprob[i]))
        if save_maps and not layout.model_shard(name, plan.k).exists():
            map_files.save_maps(layout, name, ids, st.argmax)
    if not plan.pairs:
        return
    if msg.images is None:  # map-only shard: undecodable images have no maps
        status = _read_meta_status(layout, plan.k)
        ids = [i for i in ids if status.get(i) == "ok"]
        if not ids:
            return
    for name in [target] + plan.pairs:
        if name not in maps:
            loaded = map_files.load_maps(layout, name, ids)
            maps[name] = np.stack(loaded) if len({m.shape for m in loaded}) == 1 else loaded  # type: ignore[assignment]
    for g in plan.pairs:
        a, b = maps[target], maps[g]
        if isinstance(a, list) or isinstance(b, list):  # map-only batch with varied sizes: one image at a time
            d = [pair_distances(x[None], y[None], num_classes) for x, y in zip(a, b)]
            dpa, dmiou = np.concatenate([x[0] for x in d]), np.concatenate([x[1] for x in d])
        else:
            dpa, dmiou = pair_distances(a, b, num_classes)
        table = shard.pairs.setdefault(g, {})
        for i, image_id in enumerate(ids):
            table[image_id] = (float(dpa[i]), float(dmiou[i]))


def _read_meta_status(layout: ScanLayout, k: int) -> dict[str, str]:
    import pyarrow.parquet as pq

    t = pq.read_table(layout.meta_shard(k), columns=["id", "status"])
    return dict(zip(t.column("id").to_pylist(), t.column("status").to_pylist()))


def _finish_shard(plan: _ShardPlan, shard: _ShardRows, layout: ScanLayout, target: str, num_classes: int) -> None:
    """Writer thread: write the shard's Parquet files (its maps were saved by earlier jobs)."""
    ids = plan.ids
    if plan.need_meta:
        missing = [i for i in ids if i not in shard.status]
        if missing:
            raise RuntimeError(f"scan: shard {plan.k} ended without rows for {missing[:3]}")
        st = [shard.status[i] for i in ids]
        write_shard(layout.meta_shard(plan.k),
                    meta_table(ids, [s[0] for s in st], [s[1] for s in st], [s[2] for s in st], [s[3] for s in st]))
    nan_frac = np.full(num_classes, np.nan, dtype=np.float32)
    for name in plan.run:
        path = layout.model_shard(name, plan.k)
        if path.exists():  # run only to recompute maps for a pair
            continue
        vals = shard.models.get(name, {})
        got = [vals.get(i, (nan_frac, np.nan, np.nan)) for i in ids]
        write_shard(path, model_table(name, ids, np.stack([g[0] for g in got]),
                                      np.array([g[1] for g in got], np.float32),
                                      np.array([g[2] for g in got], np.float32)))
    for g in plan.pairs:
        vals = shard.pairs.get(g, {})
        got = [vals.get(i, (np.nan, np.nan)) for i in ids]
        write_shard(layout.pair_shard(target, g, plan.k),
                    pair_table(target, g, ids, np.array([x[0] for x in got]), np.array([x[1] for x in got])))
