"""The local scan engine: run the planned shards of a scan with three threads on this machine.

  reader  — decodes the images of unfinished shards ahead of time (and hashes their files) on a
            pool of `job.decode_workers` threads, in id order, and groups them into batches of
            one image size (`engines.pipeline`, `engines.decoding`);
  main    — runs each model's `predict_proba` on a batch, nothing else (`engines.forward`);
  writer  — computes the statistics (host ones split by image with the map threads) and pair
            distances (`engines.forward.batch_result`), saves the argmax maps as index PNGs (on a
            small pool of map threads),
            then writes the finished shard's Parquet files, in order, once its maps are written
            (`engines.rows`; so a shard file on disk implies its maps exist).
`run_local(..., inline=True)` runs the same steps one after the other on the calling thread (same
files): for places where threads are unwelcome. The threaded engine stays the default even when torch
uses every core, since the reader and writer then overlap the forward instead of following it
(`benchmarks/scan.py --threads 2 --also-inline` compares the two; figures in docs/benchmarks.md).

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any, Callable, Iterator

from blindspots.batches import BatchLimits
from blindspots.scan.engines.collect import ShardCollector, call
from blindspots.scan.engines.forward import ALL_FAIL_MIN, MAX_ERROR_CHARS, batch_result, forward
from blindspots.scan.engines.job import ScanJob
from blindspots.scan.engines.stages import StageTimes
from blindspots.scan.engines.pipeline import (DONE, Batch, Errors, Worker, read_batches, run_jobs, shard_messages,
                                              submit)
from blindspots.scan.plan import ShardPlan

# Lazy imports: torch (the scan, its Ray workers and the GPU image's model loader start without them).

__all__ = ["ALL_FAIL_MIN", "MAX_ERROR_CHARS", "SCAN_SWITCH_INTERVAL_S", "run_local"]

log = logging.getLogger(__name__)

# GIL hand-over interval during a scan. The forward passes on the main thread release and retake the
# GIL around every torch op; with Python's default 5 ms, each time the reader or writer thread is
# running Python code the main thread waits up to 5 ms for it, so the scan hands the GIL over sooner
# (the effect of each interval on a forward: docs/benchmarks.md).
SCAN_SWITCH_INTERVAL_S = 5e-5
MAP_THREAD_SHARE = 2  # decode threads per map-writing thread (see `map_threads`)


def run_local(job: ScanJob, plans: list[ShardPlan], bar: Any, *, prefetch: int = 4, inline: bool = False) -> None:
    """Run the planned shards (plans with `todo`). With threads: main thread forward passes only; the
    writer thread gets each batch's probabilities and computes the statistics, saves the maps and
    writes finished shards, in order. prefetch: decoded batches the reader keeps ready. inline: every
    step on the calling thread, in the same order (same files; no threads, e.g. where threads are
    unwelcome)."""
    plans = [p for p in plans if p.todo]
    if not plans:
        return
    if inline:
        messages = (m for p in plans for m in shard_messages(job.pool, p, job.batch_size, job.resize))
        _drive(messages, ShardCollector(job, plans, call), job, bar)
        return
    # a map thread even beside one decode thread: the writer thread then takes the statistics only (with
    # the maps on it, it was the slower of the two threads at one decode worker: docs/models.md)
    map_pool = ThreadPoolExecutor(map_threads(job.decode_workers), thread_name_prefix="blindspots-scan-maps") \
        if job.save_maps else None
    stages = StageTimes() if log.isEnabledFor(logging.DEBUG) else job.stages
    try:
        _run_threads(replace(job, map_pool=map_pool, stages=stages), plans, bar, prefetch)
    finally:
        if map_pool is not None:
            map_pool.shutdown(wait=True)  # maps of shards not written (an error) still finish: no torn files
        if isinstance(stages, StageTimes):
            log.debug("scan stages (%d decode threads): %s", job.decode_workers, stages.summary())


def map_threads(decode_workers: int) -> int:
    """Threads that encode and write argmax PNGs beside `decode_workers` decode threads: one per
    MAP_THREAD_SHARE of them (encoding a map costs a fraction of decoding its image)."""
    return max(1, -(-decode_workers // MAP_THREAD_SHARE))


def _run_threads(job: ScanJob, plans: list[ShardPlan], bar: Any, prefetch: int) -> None:
    """The reader, main and writer threads of `run_local` (job.map_pool, if any, is the caller's)."""
    stop = threading.Event()
    batches: queue.Queue = queue.Queue(maxsize=prefetch)
    jobs: queue.Queue = queue.Queue(maxsize=2)  # a job holds a batch's probabilities: keep few in flight
    stage = _pinned if job.pin_memory else None
    reader = Worker(lambda: read_batches(job.pool, plans, job.batch_size, job.resize, batches, stop, stage,
                                         job.decode_workers, job.stages), "blindspots-scan-reader")
    writer = Worker(lambda: run_jobs(jobs), "blindspots-scan-writer")
    reader.start()
    writer.start()
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(min(old_interval, SCAN_SWITCH_INTERVAL_S))
    try:
        _drive(_from_reader(batches, reader), ShardCollector(job, plans, lambda w: submit(jobs, w, writer)), job, bar,
               settle=lambda: _settle(jobs, writer))
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


def _pinned(msg: Any) -> Any:
    """Reader side: a batch's pixels copied into pinned memory (`models.devices.pin_array`; unchanged
    where pinning is not available), so that the main thread's transfer to the GPU does not block
    while the reader decodes the next batch."""
    from blindspots.models.devices import pin_array  # torch: only a scan with a model on a GPU gets here

    if isinstance(msg, Batch) and msg.images is not None:
        msg.images = pin_array(msg.images)
    return msg


def _from_reader(batches: queue.Queue, reader: Worker) -> Iterator[Any]:
    """The reader thread's messages until DONE; re-raises its error instead of waiting forever."""
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
            return
        yield msg


def _settle(jobs: queue.Queue, writer: Worker) -> None:
    """Wait until the writer thread has run every job queued so far (re-raising its error)."""
    done = threading.Event()
    submit(jobs, done.set, writer)
    while not done.wait(0.5):
        if writer.error:
            raise writer.error
        if not writer.is_alive():
            raise RuntimeError("scan writer stopped without finishing")


def _drive(messages: Iterator[Any], collector: ShardCollector, job: ScanJob, bar: Any,
           settle: Callable[[], None] | None = None) -> None:
    """Forward each Batch message here; feed the collector (whose writes go to the writer thread's
    queue, or run at once), in message order.

    settle: waits for the writer's queue to empty. Called after a batch above the pixel budget (a
    photo larger than the budget, alone in its batch): its probabilities, statistics and maps are
    done with before the next forward allocates its own, so memory holds one such photo, not one
    plus the next batches'. On the README's photos (one of 13.4 MP, 1 MP budget) the peaks with and
    without it fell within the same spread of runs (1.73-1.82 GiB, three each): a bound by design,
    not a measured gain there; the cost is one idle forward per outsized photo."""
    budget = BatchLimits.of(job.batch_size).max_pixels
    stages = job.stages
    it = iter(messages)
    while True:
        with stages("main: waiting for batches"):
            msg = next(it, DONE)
        if msg is DONE:
            break
        if isinstance(msg, Errors):
            collector.errors(msg)
            bar.update(len(msg.items))
        elif isinstance(msg, Batch):
            plan = collector.plans[msg.k]
            with stages("main: forward"):
                outputs, errors = forward(msg, plan.run, job.models, job.num_classes)
            with stages("main: queueing for the writer"):
                collector.batch(msg.k, {m: len(o.pos) for m, o in outputs.items()}, errors,
                                lambda msg=msg, plan=plan, outputs=outputs, errors=errors: batch_result(
                                    msg, plan, outputs, errors, job.target, job.num_classes, job.map_pool,
                                    1 + map_threads(job.decode_workers)))
            del outputs  # inline: the probabilities go as soon as their statistics are taken
            if settle is not None and budget is not None and msg.images is not None and \
                    msg.images.shape[0] * msg.images.shape[1] * msg.images.shape[2] > budget:
                settle()
            bar.update(len(msg.ids))
        else:  # EndShard
            collector.end_shard(msg.k)
    collector.close()
