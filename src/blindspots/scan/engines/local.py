"""The local scan engine: run the planned shards of a scan with three threads on this machine.

  reader  — decodes the images of unfinished shards ahead of time (and hashes their files) and
            groups them into batches of one image size (`engines.pipeline`);
  main    — runs each model's `predict_proba` on a batch, nothing else (`engines.forward`);
  writer  — computes the statistics and pair distances (`engines.forward.batch_result`), saves the
            argmax maps as index PNGs, then writes the finished shard's Parquet files, in order
            (`engines.rows`; so a shard file on disk implies its maps exist).

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
from typing import Any, Callable, Mapping

from blindspots.scan.engines.forward import ALL_FAIL_MIN, MAX_ERROR_CHARS, Health, batch_result, forward
from blindspots.scan.engines.pipeline import DONE, Batch, Errors, Worker, read_batches, run_jobs, submit
from blindspots.scan.engines.rows import ShardRows, add_batch, add_errors, finish_shard
from blindspots.scan.layout import ScanLayout
from blindspots.scan.plan import ShardPlan

__all__ = ["ALL_FAIL_MIN", "MAX_ERROR_CHARS", "SCAN_SWITCH_INTERVAL_S", "run_local"]

log = logging.getLogger(__name__)

# GIL hand-over interval during a scan. The forward passes on the main thread release and retake the
# GIL around every torch op; with Python's default 5 ms, each time the reader or writer thread is
# running Python code the main thread waits up to 5 ms for it. Measured: a busy pure-Python thread
# slows a 1-thread forward 4.5x at 5 ms, 1.16x at 0.2 ms, not at all at 0.05 ms.
SCAN_SWITCH_INTERVAL_S = 5e-5


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
    rows: dict[int, ShardRows] = {}  # touched by the writer thread only
    health = Health()
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
            shard = rows.setdefault(msg.k, ShardRows())
            if isinstance(msg, Errors):
                submit(jobs, lambda msg=msg, shard=shard: add_errors(msg, shard), writer)
                bar.update(len(msg.items))
            elif isinstance(msg, Batch):
                outputs, errors = forward(msg, plan.run, models, num_classes)
                health.add(plan.run, {m: len(o.pos) for m, o in outputs.items()}, errors)
                submit(jobs, lambda msg=msg, plan=plan, shard=shard, outputs=outputs, errors=errors: add_batch(
                    batch_result(msg, plan, outputs, errors, target, num_classes), plan, shard, layout, target,
                    num_classes, save_maps), writer)
                bar.update(len(msg.ids))
            else:  # EndShard
                health.check(planned, final=False)
                deferred.append(lambda plan=plan, shard=rows.pop(msg.k): finish_shard(
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
