"""Row ranges split over Python threads that each run single-threaded torch / numba (nogil) work.

Why: a torch op on a cache-sized block is too short to be worth one OpenMP parallel region per op;
each region ends in a barrier, and on a loaded machine one descheduled thread stalls every block
(measured under load on 2 cores: MDSA in 4096-row blocks with 2 OpenMP threads ran at 10% of the
whole-array matmul, 2 Python threads with 1 torch thread each at ~90% of the same matmul split the
same way). Splitting the rows once and running each part on its own thread needs one join per call.

The work functions must release the GIL for most of their time (torch ops, numba ``nogil`` kernels).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Callable

import torch

_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
_POOL_SIZE = 0


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL, _POOL_SIZE
    with _LOCK:
        if _POOL is None or _POOL_SIZE < workers:
            old = _POOL
            _POOL = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="blindspots-surprise")
            _POOL_SIZE = workers
            if old is not None:  # its idle threads exit; work already submitted to it still finishes
                old.shutdown(wait=False)
        return _POOL


def split_threads(n: int, min_rows: int) -> int:
    """How many parts to split n rows into: torch.get_num_threads(), fewer when a part would hold
    fewer than `min_rows` rows (1: run on the calling thread)."""
    return max(1, min(torch.get_num_threads(), n // max(min_rows, 1)))


def run_split(n: int, parts: int, fn: Callable[[int, int], None], align: int = 1) -> None:
    """Run fn(lo, hi) over `parts` contiguous ranges covering [0, n) (boundaries multiples of `align`),
    each on its own thread with torch at one thread; parts <= 1 runs fn(0, n) here, unchanged.

    torch's thread count is process-wide (MKL): it is set to 1 for the call and restored after it, so
    torch work started meanwhile on other threads of the process also runs on one thread.
    """
    if parts <= 1 or n <= 1:
        fn(0, n)
        return
    step = -(-n // parts)
    step = -(-step // align) * align
    bounds = [(lo, min(n, lo + step)) for lo in range(0, n, step)]

    def one(lo: int, hi: int) -> None:
        torch.set_num_threads(1)  # OpenMP's count is per thread: set it on the worker too
        fn(lo, hi)

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        futures = [_pool(len(bounds)).submit(one, lo, hi) for lo, hi in bounds]
        wait(futures)  # all finish before the thread count is restored, even when one raised
        for f in futures:
            f.result()
    finally:
        torch.set_num_threads(old)
