"""The local scan engine: run the planned shards of a scan with three threads on this machine.

  reader  — decodes the images of unfinished shards ahead of time (and hashes their files) and
            groups them into batches of one image size (`engines.pipeline`);
  main    — runs each model's `predict_proba` on a batch, nothing else;
  writer  — computes the statistics and pair distances (`scan.stats`), saves the argmax maps as
            index PNGs, then writes the finished shard's Parquet files, in order (so a shard file
            on disk implies its maps exist).

A model that raises on a batch is retried image by image; the images it still fails on get its
message as their error (status 'error' in the score table) and the scan goes on. A model that has
failed on every image it was given (its first ALL_FAIL_MIN images, or all of them) stops the scan
with one ValueError naming it, before any shard with its failures is written.
"""
from __future__ import annotations

import logging
import queue
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from blindspots.models.protocol import ModelFailure

from blindspots.scan import maps as map_files
from blindspots.scan import schema
from blindspots.scan.engines.pipeline import DONE, Batch, Errors, Worker, read_batches, run_jobs, submit
from blindspots.scan.layout import ScanLayout
from blindspots.scan.plan import ShardPlan
from blindspots.scan.shards import meta_table, model_table, pair_table, write_shard
from blindspots.scan.stats import model_stats, pair_distances

log = logging.getLogger(__name__)

# GIL hand-over interval during a scan. The forward passes on the main thread release and retake the
# GIL around every torch op; with Python's default 5 ms, each time the reader or writer thread is
# running Python code the main thread waits up to 5 ms for it. Measured: a busy pure-Python thread
# slows a 1-thread forward 4.5x at 5 ms, 1.16x at 0.2 ms, not at all at 0.05 ms.
SCAN_SWITCH_INTERVAL_S = 5e-5
ALL_FAIL_MIN = 8  # a model that failed on this many images (or all it got) and on none ran: stop
MAX_ERROR_CHARS = 500


@dataclass
class _ShardRows:
    """Rows of one shard, filled batch by batch, keyed by id (writer thread only)."""

    status: dict[str, tuple[str, str | None, int | None, int | None, str | None]] = field(default_factory=dict)
    models: dict[str, dict[str, tuple[np.ndarray, float, float]]] = field(default_factory=dict)
    errors: dict[str, dict[str, str]] = field(default_factory=dict)  # model -> id -> message
    pairs: dict[str, dict[str, tuple[float, float]]] = field(default_factory=dict)
    disk: dict[str, set[str]] = field(default_factory=dict)  # model -> ids with a saved map (read once)


@dataclass
class _Output:
    """One model's probabilities on part of a batch: positions into the batch's ids."""

    pos: list[int]
    proba: np.ndarray  # float32 [len(pos), C, H, W]


@dataclass
class _Health:
    """Per model: images it produced output for, images it failed on, and the first failure."""

    ok: dict[str, int] = field(default_factory=dict)
    failed: dict[str, int] = field(default_factory=dict)
    first: dict[str, tuple[str, str]] = field(default_factory=dict)

    def undecided(self) -> list[str]:
        """Models that have failed and never succeeded yet."""
        return [m for m, f in self.failed.items() if f and not self.ok.get(m)]

    def check(self, planned: Mapping[str, int], final: bool) -> None:
        for m in self.undecided():
            if final or self.failed[m] >= min(ALL_FAIL_MIN, planned.get(m, 0)):
                image_id, msg = self.first[m]
                raise ValueError(f"models[{m!r}]: expected a model that runs on the pool's images, got one that "
                                 f"failed on every image it was given ({self.failed[m]}), e.g. on {image_id!r}: "
                                 f"{msg.split(': ', 1)[-1]}")


def run_local(pool: Any, models: Mapping[str, Any], layout: ScanLayout, plans: list[ShardPlan], target: str,
              num_classes: int, batch_size: int, resize: tuple[int, int] | None, save_maps: bool, prefetch: int,
              bar: Any) -> None:
    """Run the planned shards (plans with `todo`). Main thread: forward passes only; the writer
    thread gets each batch's probabilities and computes the statistics, saves the maps and writes
    finished shards, in order."""
    plans = [p for p in plans if p.todo]
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
    health = _Health()
    planned = {m: sum(len(p.ids) for p in plans if m in p.run) for m in models}
    deferred: list[Callable[[], None]] = []  # shard writes held back while a model has only failed
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
                outputs, errors = _forward(msg, plan, models, num_classes, health)
                submit(jobs, lambda msg=msg, plan=plan, shard=shard, outputs=outputs, errors=errors: _batch_rows(
                    msg, plan, shard, outputs, errors, layout, target, num_classes, save_maps), writer)
                bar.update(len(msg.ids))
            else:  # EndShard
                health.check(planned, final=False)
                deferred.append(lambda plan=plan, shard=rows.pop(msg.k): _finish_shard(
                    plan, shard, layout, target, num_classes))
                if not health.undecided():
                    for job in deferred:
                        submit(jobs, job, writer)
                    deferred.clear()
        health.check(planned, final=True)
        for job in deferred:
            submit(jobs, job, writer)
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


def _predict(model: Any, ids: list[str], images: np.ndarray, name: str, num_classes: int) -> np.ndarray:
    """float32 [n, C, H, W] of one model on images uint8 [n, H, W, 3]; raises on a bad output."""
    n, h, w = images.shape[:3]
    if hasattr(model, "predict_proba_ids"):
        proba = model.predict_proba_ids(ids, sizes=[(h, w)] * n)
    else:
        proba = model.predict_proba(images)
    if proba.shape != (n, num_classes, h, w):
        raise ValueError(f"models[{name!r}]: expected probabilities of shape {(n, num_classes, h, w)}, "
                         f"got {proba.shape}")
    return proba


def _message(name: str, exc: Exception) -> str:
    # ModelFailure already names the model kind, the input shape and the original exception's type
    head = f"{name}: " if isinstance(exc, ModelFailure) else f"{name}: {type(exc).__name__}: "
    text = head + " ".join(str(exc).split())  # one line, whatever the model raised
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS - 3] + "..."


def _forward(msg: Batch, plan: ShardPlan, models: Mapping[str, Any], num_classes: int,
             health: _Health) -> tuple[dict[str, _Output], dict[str, dict[str, str]]]:
    """Each running model's output on this batch (main thread), and its failures (id -> message).

    A model that raises on the batch is retried one image at a time to find the images it fails
    on; Exceptions only (KeyboardInterrupt and friends still stop the scan)."""
    if msg.images is None:
        return {}, {}
    outputs: dict[str, _Output] = {}
    errors: dict[str, dict[str, str]] = {}
    for name in plan.run:
        model = models[name]
        try:
            outputs[name] = _Output(list(range(len(msg.ids))), _predict(model, msg.ids, msg.images, name, num_classes))
        except Exception as exc:  # noqa: BLE001 - recorded per image below
            found = [(0, None, exc)] if len(msg.ids) == 1 else _one_by_one(model, msg, name, num_classes)
            good = [(i, p) for i, p, _ in found if p is not None]
            if good:
                outputs[name] = _Output([i for i, _ in good], np.concatenate([p for _, p in good]))
            for i, _, err in found:
                if err is not None:
                    text = _message(name, err)
                    log.warning("model %r failed on %s: %s", name, msg.ids[i], text)
                    errors.setdefault(name, {})[msg.ids[i]] = text
                    health.first.setdefault(name, (msg.ids[i], text))
        if name in outputs:
            health.ok[name] = health.ok.get(name, 0) + len(outputs[name].pos)
        health.failed[name] = health.failed.get(name, 0) + len(errors.get(name, {}))
    return outputs, errors


def _one_by_one(model: Any, msg: Batch, name: str, num_classes: int
                ) -> list[tuple[int, np.ndarray | None, Exception | None]]:
    """(position, probabilities [1, C, H, W] or None, exception or None) per image of a batch that failed."""
    found: list[tuple[int, np.ndarray | None, Exception | None]] = []
    for i, image_id in enumerate(msg.ids):
        try:
            found.append((i, _predict(model, [image_id], msg.images[i:i + 1], name, num_classes), None))
        except Exception as exc:  # noqa: BLE001 - this image's error row
            found.append((i, None, exc))
    return found


def _error_rows(msg: Errors, shard: _ShardRows) -> None:
    for image_id, reason in msg.items:
        shard.status[image_id] = (schema.STATUS_ERROR, reason, None, None, None)


def _batch_rows(msg: Batch, plan: ShardPlan, shard: _ShardRows, outputs: dict[str, _Output],
                errors: dict[str, dict[str, str]], layout: ScanLayout, target: str, num_classes: int,
                save_maps: bool) -> None:
    """Writer thread: statistics, maps and pair distances of one batch into the shard's rows."""
    ids = msg.ids
    maps: dict[str, dict[str, np.ndarray]] = {}  # model -> id -> argmax map
    whole: dict[str, np.ndarray] = {}  # model -> argmax [n, H, W] when it ran on every image of the batch
    if msg.images is not None:
        hashes = msg.hashes or [None] * len(ids)
        for image_id, (h, w), digest in zip(ids, msg.sizes, hashes):
            shard.status[image_id] = (schema.STATUS_OK, None, w, h, digest)
    for name, errs in errors.items():
        shard.errors.setdefault(name, {}).update(errs)
    for name, out in outputs.items():
        st = model_stats(out.proba)
        out_ids = [ids[i] for i in out.pos]
        maps[name] = dict(zip(out_ids, st.argmax))
        if len(out_ids) == len(ids):
            whole[name] = st.argmax
        table = shard.models.setdefault(name, {})
        for j, image_id in enumerate(out_ids):
            table[image_id] = (st.frac[j], float(st.entropy[j]), float(st.maxprob[j]))
        if save_maps and not layout.model_shard(name, plan.k).exists():
            map_files.save_maps(layout, name, out_ids, st.argmax)
    if not plan.pairs:
        return
    for name in [target] + plan.pairs:
        if name not in maps and name not in plan.run:  # finished earlier: read its saved maps back
            have = _saved(layout, shard, name, plan.k)
            want = [i for i in ids if i in have]
            maps[name] = dict(zip(want, map_files.load_maps(layout, name, want)))
    for g in plan.pairs:
        table = shard.pairs.setdefault(g, {})
        if target in whole and g in whole:  # the common case: one vectorised call on the batch's maps
            dpa, dmiou = pair_distances(whole[target], whole[g], num_classes)
            table.update(zip(ids, zip(dpa.tolist(), dmiou.tolist())))
            continue
        a, b = maps.get(target, {}), maps.get(g, {})
        both = [i for i in ids if i in a and i in b]
        for image_id, d in zip(both, _distances([a[i] for i in both], [b[i] for i in both], num_classes)):
            table[image_id] = d


def _distances(a: list[np.ndarray], b: list[np.ndarray], num_classes: int) -> list[tuple[float, float]]:
    """(dpa, dmiou) per image of two lists of maps; one vectorised call when all shapes agree."""
    if not a:
        return []
    if len({m.shape for m in a} | {m.shape for m in b}) == 1:
        dpa, dmiou = pair_distances(np.stack(a), np.stack(b), num_classes)
    else:  # varied sizes (a map-only batch of a pool of many sizes): one image at a time
        d = [pair_distances(x[None], y[None], num_classes) for x, y in zip(a, b)]
        dpa, dmiou = np.concatenate([x[0] for x in d]), np.concatenate([x[1] for x in d])
    return [(float(x), float(y)) for x, y in zip(dpa, dmiou)]


def _saved(layout: ScanLayout, shard: _ShardRows, model: str, k: int) -> set[str]:
    """Ids of shard k that have a saved map of `model` (finished shard): decoded and no model error."""
    if model not in shard.disk:
        import pyarrow.parquet as pq

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


def _finish_shard(plan: ShardPlan, shard: _ShardRows, layout: ScanLayout, target: str, num_classes: int) -> None:
    """Writer thread: write the shard's Parquet files (its maps were saved by earlier jobs)."""
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
