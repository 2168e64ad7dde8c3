"""The scan's decoding: a shard's images decoded on a pool of threads, handed on in id order.

Pillow's JPEG/PNG decoders, numpy's copies, blake2b hashing and Pillow's resize all release the
GIL, so threads decode in parallel without pickling pixels between processes (measured against a
process pool in `benchmarks/host_pipeline.py`). Two ways to split the work, both giving exactly the
items (pixels, hashes, error reasons) a serial `pool.iter_hashed_items(ids)` gives:

- a `PoolSource` with the base item loop (Parquet, WebDataset, list files, prefixes, FiftyOne): its
  bytes are read here, in order and in the source's own runs (one range request per shard run, not
  one per image), and only the decoding goes to the workers;
- any other pool (the folder `ImagePool`, duck-typed pools): each worker reads and decodes one id
  through the pool's own `iter_hashed_items([id])` (or `iter_items`), so per-file rules stay its own.

Memory: at most `ahead(...)` images are in flight beyond the one being handed on: one per worker,
and up to twice that while they fit the batch pixel budget (so a pool of photos larger than the
budget holds one decoded photo per worker, never more).
"""
from __future__ import annotations

import functools
import logging
import os
from collections import deque
from concurrent.futures import Executor, Future
from typing import Any, Callable, Iterator, Sequence

import numpy as np
from PIL import Image

from blindspots.data.sources.base import PoolItem, PoolSource
from blindspots.scan.engines.stages import NO_STAGES

log = logging.getLogger(__name__)

# Decode threads by default: at most 4. On an H200 with a 16-core host (256 JPEGs of 512x512, a MiT-b2-like
# SegFormer, batch 54) the scan ran 159.5 / 196.8 img/s (fp32 / bf16) with 4 threads against 123.7 / 155.4
# with 16: more threads contend for the GIL with the main thread that launches the model's kernels, and 4
# already decode 958 img/s there. Pools of large photos decode slower per image: pass decode_workers.
MAX_DEFAULT_WORKERS = 4

#: (id, image uint8 [H, W, 3] after any resize, (H, W) before it, content hash or None)
Decoded = tuple[str, np.ndarray, tuple[int, int], "str | None"]


def default_decode_workers() -> int:
    """Decode threads for a scan: the cores this process may run on, at most MAX_DEFAULT_WORKERS (4)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, MAX_DEFAULT_WORKERS))


def check_decode_workers(workers: int | None) -> int:
    """`workers` as an int >= 1 (None: `default_decode_workers()`); ValueError naming the argument."""
    if workers is None:
        return default_decode_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"decode_workers: expected a positive integer (or None: one per core), got {workers!r}")
    return workers


def resize_image(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 [H, W, 3] -> uint8 [size[0], size[1], 3], bilinear (the scan's `resize`)."""
    return np.asarray(Image.fromarray(image).resize((size[1], size[0]), Image.BILINEAR))


def ahead(workers: int, budget: int | None, largest: int) -> int:
    """Images decoded ahead of the one handed on: `workers`, up to 2 x workers while that many of the
    largest image seen so far (`largest` pixels, 0: none yet) fit the pixel `budget` (None: no budget)."""
    if budget is None:
        return 2 * workers
    fit = budget // largest if largest else workers
    return max(workers, min(2 * workers, fit))


def _reads_raw(pool: Any) -> bool:
    """True for a PoolSource whose items come from the base loop (`read` bytes, then `_decode`)."""
    return isinstance(pool, PoolSource) and type(pool)._items is PoolSource._items


def _raw_tasks(pool: PoolSource, ids: Sequence[str]) -> Iterator[Callable[[], PoolItem]]:
    """One task per id, in order: the bytes read here (the source's runs), the decode left to the task.

    The same checks, warnings and items as `PoolSource.iter_hashed_items(ids)`."""
    todo = [str(i) for i in ids]
    pool.check_ids(todo)
    if pool.reads_need_listing:
        pool.id_array  # shard sources find an item through their index: listed before any read
    refused = pool.refused
    raws = pool.read([i for i in todo if i not in refused])
    try:
        for image_id in todo:
            if image_id in refused:
                log.warning("skipping %s: %s", image_id, refused[image_id])
                yield functools.partial(PoolItem, image_id, None, refused[image_id])
            else:
                yield functools.partial(pool._decode, next(raws), True)  # noqa: SLF001 - its own decode rule
    finally:
        raws.close() if hasattr(raws, "close") else None


def _item_tasks(pool: Any, ids: Sequence[str]) -> Iterator[Callable[[], PoolItem]]:
    """One task per id: the pool's own item loop on that id alone (read, decode, hash in the task)."""
    items = getattr(pool, "iter_hashed_items", None) or pool.iter_items
    for image_id in ids:
        yield functools.partial(lambda i: next(iter(items([i]))), image_id)


def _finish(task: Callable[[], PoolItem], resize: tuple[int, int] | None,
            hash_of: Callable[[str], str] | None) -> tuple[PoolItem, np.ndarray | None, tuple[int, int] | None, Any]:
    """Run one task and what follows its decode on the same worker: the resize and, for a pool without
    hashed items, the content hash. -> (item, image to batch, size before resize, hash)."""
    item = task()
    if item.image is None:
        return item, None, None, None
    image = item.image
    size = tuple(image.shape[:2])
    if resize is not None and size != tuple(resize):
        image = resize_image(image, resize)
    digest = item.content_hash if hash_of is None else _hash(hash_of, item.id)
    return item, image, size, digest


def _hash(hash_of: Callable[[str], str], image_id: str) -> str | None:
    """The content hash of one image's file, or None (the file changed under us)."""
    try:
        return hash_of(image_id)
    except (OSError, ValueError):
        return None


def decoded_items(pool: Any, ids: Sequence[str], resize: tuple[int, int] | None, errors: list[tuple[str, str]],
                  executor: Executor | None = None, workers: int = 1, budget: int | None = None,
                  stages: Any = NO_STAGES) -> Iterator[Decoded]:
    """(id, image, size before resize, content hash) per readable image of `ids`, in order; the others'
    (id, reason) go to `errors`. executor: the decode threads (None or workers=1: on this thread, as a
    serial reader); budget: the batch pixel budget that bounds the images decoded ahead (`ahead`);
    stages: the scan's per-stage clock (`engines.stages`)."""
    hashed = hasattr(pool, "iter_hashed_items")
    hash_of = None if hashed else getattr(pool, "content_hash", None)
    tasks = _raw_tasks(pool, ids) if _reads_raw(pool) else _item_tasks(pool, ids)
    run = functools.partial(_finish, resize=resize, hash_of=hash_of)
    if executor is None or workers <= 1:
        results: Iterator[tuple[Any, ...]] = (run(t) for t in tasks)
    else:
        results = _ordered(executor, run, tasks, workers, budget, stages)
    for item, image, size, digest in results:
        if image is None:
            errors.append((item.id, str(item.error)))
            continue
        yield item.id, image, size, digest


def _ordered(executor: Executor, run: Callable[[Any], Any], tasks: Iterator[Any], workers: int,
             budget: int | None, stages: Any = NO_STAGES) -> Iterator[Any]:
    """run(task) for each task on the executor, results in task order, `ahead(...)` in flight at most."""
    pending: deque[Future] = deque()
    largest = 0
    try:
        for task in tasks:
            while len(pending) >= ahead(workers, budget, largest):
                with stages("reader: waiting for decode threads"):
                    result = pending.popleft().result()
                largest = max(largest, _pixels(result))
                yield result
            pending.append(executor.submit(run, task))
        while pending:
            with stages("reader: waiting for decode threads"):
                result = pending.popleft().result()
            yield result
    finally:
        for f in pending:  # an interrupted scan: drop what was not started
            f.cancel()


def _pixels(result: tuple[Any, ...]) -> int:
    image = result[1]
    return 0 if image is None else int(image.shape[0]) * int(image.shape[1])
