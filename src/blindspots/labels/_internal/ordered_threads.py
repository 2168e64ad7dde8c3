"""Chunks scored on a few threads, results handed back in input order, few chunks in memory at once.

The compiled passes release the GIL (numba `nogil`, numpy's exp), so two threads use both cores of a
small machine for the memory-bound gather and the pooling, where one thread leaves a core idle.
"""
from __future__ import annotations

import os
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Iterable, Iterator, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def resolve_n_jobs(n_jobs: int | None) -> int:
    """cleanlab's convention: None -> every core this process may use; an int >= 1 -> that many."""
    if n_jobs is None:
        try:
            return max(len(os.sched_getaffinity(0)), 1)
        except AttributeError:  # not on Linux
            return os.cpu_count() or 1
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, int) or n_jobs < 1:
        raise ValueError(f"n_jobs: expected None or an int >= 1, got {n_jobs!r}")
    return n_jobs


def ordered_map(fn: Callable[[T], R], items: Iterable[T], n_jobs: int) -> Iterator[R]:
    """fn over items on n_jobs threads, yielded in input order.

    At most n_jobs + 1 items are submitted and not yet consumed, so a stream stays flat in memory and
    an error surfaces at its item's turn (the same one a sequential loop would raise). `items` is
    iterated on the caller's thread (a stream's model forward runs there, beside the scoring).
    """
    if n_jobs <= 1:
        for item in items:
            yield fn(item)
        return
    pending: deque[Future[R]] = deque()
    with ThreadPoolExecutor(n_jobs, thread_name_prefix="blindspots-labels") as pool:
        try:
            for item in items:
                pending.append(pool.submit(fn, item))
                if len(pending) > n_jobs:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:  # the consumer stopped early or an item raised: drop what has not started
            for f in pending:
                f.cancel()
