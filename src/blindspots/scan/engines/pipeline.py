"""The scan's threads: a reader that decodes images ahead into same-size batches, and a writer
that runs file writes in order. Bounded queues keep memory flat; every blocking put checks a
stop flag (or the writer's health) so that an interrupted scan never hangs.
"""
from __future__ import annotations

import queue
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from PIL import Image

from blindspots.batches import BatchLimits, size_batches


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
                 q: queue.Queue, stop: threading.Event, stage: Callable[[Any], Any] | None = None) -> None:
    """Reader thread: put each planned shard's messages (`shard_messages`), then DONE. stage: applied
    to each message here, on this thread, before it is queued (e.g. pinning a batch's pixels)."""
    for plan in plans:
        for msg in shard_messages(pool, plan, batch_size, resize):
            if stage is not None:
                msg = stage(msg)
            if stop.is_set() or not put_until_stopped(q, msg, stop):
                return
    put_until_stopped(q, DONE, stop)


def shard_messages(pool: Any, plan: Any, batch_size: int | BatchLimits,
                   resize: tuple[int, int] | None) -> Iterator[Batch | Errors | EndShard]:
    """One shard's messages, in order: same-size Batch messages, then the shard's Errors
    (undecodable ids, if any), then EndShard. Both engines batch through here, so a shard's
    batches (and hence every float of the score table) do not depend on the engine.

    plan: an object with .k, .ids and .needs_images; a shard that needs no images gives Batch
    messages without pixels (images=None). resize: (H, W) to resize to (bilinear), or None.
    batch_size: a `BatchLimits` (images and pixels per batch, `blindspots.batches.size_batches`), or
    an image count with the default pixel budget.
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
    decoded = _decoded(pool, plan.ids, resize, errors)
    for group in size_batches(decoded, lambda g: g[1].shape, max_images=limits.max_images,
                              max_pixels=limits.max_pixels):
        yield make_batch(plan.k, group)
    if errors:
        yield Errors(plan.k, errors)
    yield EndShard(plan.k)


def _decoded(pool: Any, ids: Sequence[str], resize: tuple[int, int] | None, errors: list[tuple[str, str]]
             ) -> Iterator[tuple[str, np.ndarray, tuple[int, int], str | None]]:
    """(id, image, size before resize, content hash) per readable image; the others go to `errors`."""
    hashed = getattr(pool, "iter_hashed_items", None)
    hash_of = None if hashed is not None else getattr(pool, "content_hash", None)
    for item in (hashed or pool.iter_items)(ids):
        if item.image is None:
            errors.append((item.id, str(item.error)))
            continue
        image = item.image
        size = image.shape[:2]
        if resize is not None and tuple(size) != tuple(resize):
            image = resize_image(image, resize)
        yield item.id, image, size, item.content_hash if hashed else _hash(hash_of, item.id)


def resize_image(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 [H, W, 3] -> uint8 [size[0], size[1], 3], bilinear (the scan's `resize`)."""
    return np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.BILINEAR))


def _hash(hash_of: Callable[[str], str] | None, image_id: str) -> str | None:
    """The content hash of one image's file, or None (no hasher, or the file changed under us)."""
    if hash_of is None:
        return None
    try:
        return hash_of(image_id)
    except (OSError, ValueError):
        return None


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
