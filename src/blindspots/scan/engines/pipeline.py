"""The scan's threads: a reader that decodes images ahead into same-size batches (on a pool of
decode threads, `engines.decoding`), and a writer that runs file writes in order. Bounded queues keep memory flat; every blocking put checks a
stop flag (or the writer's health) so that an interrupted scan never hangs.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from blindspots.batches import BatchLimits, size_batches
from blindspots.scan.engines.decoding import decoded_items, resize_image
from blindspots.scan.engines.stages import NO_STAGES

__all__ = ["DONE", "Batch", "EndShard", "Errors", "Worker", "make_batch", "put_until_stopped", "read_batches",
           "resize_image", "run_jobs", "shard_messages", "submit"]


@dataclass
class Batch:
    """Images of one size from shard k; `sizes` are the sizes before any resize."""

    k: int
    ids: list[str]
    images: np.ndarray | None  # uint8 [n, H, W, 3]; None for a map-only shard
    sizes: list[tuple[int, int]]  # original (H, W) per image
    hashes: list[str | None] = field(default_factory=list)  # content hash of each image's file


@dataclass
class Errors:
    """Ids of shard k that could not be decoded, with the reason."""

    k: int
    items: list[tuple[str, str]]  # (id, reason)


@dataclass
class EndShard:
    """Every image of shard k has been sent."""

    k: int


DONE = object()  # sentinel: no more messages / jobs


class Worker(threading.Thread):
    """A daemon thread that records its exception for the main thread to re-raise."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._fn = target
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._fn()
        except BaseException as e:  # noqa: BLE001 - re-raised in the main thread
            self.error = e


def put_until_stopped(q: queue.Queue, item: Any, stop: threading.Event) -> bool:
    """Put with a timeout loop so that a stopped consumer never blocks the producer forever."""
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def read_batches(pool: Any, plans: Sequence[Any], batch_size: int | BatchLimits, resize: tuple[int, int] | None,
                 q: queue.Queue, stop: threading.Event, stage: Callable[[Any], Any] | None = None,
                 workers: int = 1, stages: Any = NO_STAGES) -> None:
    """Reader thread: put each planned shard's messages (`shard_messages`), then DONE. stage: applied
    to each message here, on this thread, before it is queued (e.g. pinning a batch's pixels).
    workers: decode threads (`engines.decoding`; 1: every image decoded on this thread). stages: the
    scan's per-stage clock (`engines.stages`)."""
    executor = ThreadPoolExecutor(workers, thread_name_prefix="blindspots-scan-decode") if workers > 1 else None
    try:
        for plan in plans:
            for msg in shard_messages(pool, plan, batch_size, resize, executor, workers, stages):
                if stage is not None:
                    with stages("reader: pinning"):
                        msg = stage(msg)
                with stages("reader: waiting for the main thread"):
                    put = not stop.is_set() and put_until_stopped(q, msg, stop)
                if not put:
                    return
        put_until_stopped(q, DONE, stop)
    finally:
        if executor is not None:
            executor.shutdown(wait=True, cancel_futures=True)


def shard_messages(pool: Any, plan: Any, batch_size: int | BatchLimits, resize: tuple[int, int] | None,
                   executor: Executor | None = None, workers: int = 1,
                   stages: Any = NO_STAGES) -> Iterator[Batch | Errors | EndShard]:
    """One shard's messages, in order: same-size Batch messages, then the shard's Errors
    (undecodable ids, if any), then EndShard. Both engines batch through here, so a shard's
    batches (and hence every float of the score table) do not depend on the engine, nor on how
    many threads decode (`engines.decoding.decoded_items` hands the images on in id order).

    plan: an object with .k, .ids and .needs_images; a shard that needs no images gives Batch
    messages without pixels (images=None). resize: (H, W) to resize to (bilinear), or None.
    batch_size: a `BatchLimits` (images and pixels per batch, `blindspots.batches.size_batches`), or
    an image count with the default pixel budget. executor, workers: the decode threads (None: this
    thread decodes).
    Each decoded image's file is hashed here too, so exact duplicates are known without a second
    pass: from the same read as the decode when the pool has `iter_hashed_items` (`ImagePool`),
    else by `pool.content_hash(id)`, when the pool has it.
    """
    limits = BatchLimits.of(batch_size)
    if not plan.needs_images:  # only pair shards missing: the maps are read back, no decoding
        step = limits.max_images or 16
        for s in range(0, len(plan.ids), step):
            yield Batch(plan.k, plan.ids[s:s + step], None, [])
        yield EndShard(plan.k)
        return
    errors: list[tuple[str, str]] = []
    decoded = decoded_items(pool, plan.ids, resize, errors, executor, workers, limits.max_pixels, stages)
    for group in size_batches(decoded, lambda g: g[1].shape, max_images=limits.max_images,
                              max_pixels=limits.max_pixels):
        yield make_batch(plan.k, group)
    if errors:
        yield Errors(plan.k, errors)
    yield EndShard(plan.k)


def make_batch(k: int, group: list[tuple[str, np.ndarray, tuple[int, int], str | None]]) -> Batch:
    return Batch(k, [g[0] for g in group], np.stack([g[1] for g in group]), [tuple(g[2]) for g in group],
                 [g[3] for g in group])


def run_jobs(q: queue.Queue) -> None:
    """Run queued write jobs in order until the DONE sentinel."""
    while True:
        job = q.get()
        if job is DONE:
            return
        job()


def submit(jobs: queue.Queue, job: Callable[[], None], writer: Worker) -> None:
    """Queue a write job; re-raise the writer's error instead of blocking on a dead writer."""
    while True:
        if writer.error:
            raise writer.error
        try:
            jobs.put(job, timeout=0.5)
            return
        except queue.Full:
            continue
