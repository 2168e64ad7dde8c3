"""Row ranges split over Python threads that each run single-threaded torch / numba (nogil) work.

Why: a torch op on a cache-sized block is too short to be worth one OpenMP parallel region per op;
each region ends in a barrier, and on a loaded machine one descheduled thread stalls every block.
Splitting the rows once and running each part on its own thread needs one join per call (the
two compared under load: docs/benchmarks.md).

The work functions must release the GIL for most of their time (torch ops, numba ``nogil`` kernels).
"""
from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Callable

import torch

_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0
_ONE = threading.local()  # .set: this worker thread already runs torch at one thread


def _submit(fn: Callable[[int, int], None], bounds: list[tuple[int, int]]) -> list[Future]:
    """Submit fn over `bounds` to the shared pool, grown (and the smaller one shut down) when too small.

    Under the lock, so that another caller growing the pool cannot shut down the one submitted to."""
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE < len(bounds):
            old = _POOL
            _POOL = ThreadPoolExecutor(max_workers=len(bounds), thread_name_prefix="blindspots-surprise")
            _POOL_SIZE = len(bounds)
            if old is not None:  # its idle threads exit now; work already submitted to it still finishes
                old.shutdown(wait=False)
        return [_POOL.submit(fn, lo, hi) for lo, hi in bounds]


def split_threads(n: int, min_rows: int) -> int:
    """How many parts to split n rows into: torch.get_num_threads(), fewer when a part would hold
    fewer than `min_rows` rows (1: run on the calling thread)."""
    return max(1, min(torch.get_num_threads(), n // max(min_rows, 1)))


def _one_thread() -> bool:
    """Run torch at one thread on this (worker) thread; True when this call set it."""
    if getattr(_ONE, "set", False):
        return False
    # torch sets a thread's count from the stored one on the thread's first parallel op or get_num_threads;
    # done first here, or that would later undo the 1 set below
    torch.get_num_threads()
    torch.set_num_threads(1)
    _ONE.set = True
    return True


def run_split(n: int, parts: int, fn: Callable[[int, int], None], align: int = 1) -> None:
    """Run fn(lo, hi) over `parts` contiguous ranges covering [0, n) (boundaries multiples of `align`),
    each on a worker thread with torch at one thread; parts <= 1 runs fn(0, n) here, unchanged.

    No thread count changes outside the workers: torch's count is per thread (OpenMP, MKL), but
    ``torch.set_num_threads`` also stores the count that threads started later begin with. A worker sets
    its own count once, on its first part; the caller then stores its own count back (its count is never
    changed), before returning, so threads started afterwards begin as they would have.
    """
    if parts <= 1 or n <= 1:
        fn(0, n)
        return
    step = -(-n // parts)
    step = -(-step // align) * align
    bounds = [(lo, min(n, lo + step)) for lo in range(0, n, step)]
    first = []  # parts whose worker set its thread count (list.append: atomic across threads)

    def one(lo: int, hi: int) -> None:
        if _one_thread():
            first.append(lo)
        fn(lo, hi)

    mine = torch.get_num_threads()
    futures = _submit(one, bounds)
    try:
        wait(futures)  # all finish before the stored count is put back, even when one raised
        for f in futures:
            f.result()
    finally:
        if first:
            torch.set_num_threads(mine)
