"""Run compiled per-chunk kernels on torch's own OpenMP threads (the ones a forward just used).

Why: right after a forward, torch's OpenMP workers spin, waiting for the next parallel region; a
thread of our own (a Python thread, numba's own OpenMP or workqueue pool: numba's omppool loads a
second libgomp with its own pool) shares a core with a spinning worker and runs at about half speed
(measured slower than one thread, see ``fused``). Opening the parallel region in torch's libgomp
(``GOMP_parallel``) hands the work to the spinning workers themselves: measured 1.96x on 2 cores
for a row-sum kernel run right after a torch matmul, no new thread created.

A kernel is a numba ``cfunc(void(voidptr))`` ("trampoline", in ``_fused_kernels``) that reads its
arguments from an int64 array (``pack``) and takes chunks by an atomic counter until none are left: each
thread of the region runs it, so a descheduled worker only costs the chunk it holds. Where torch
has no libgomp (other OpenMP runtimes, other systems) or one thread, the trampoline runs on the
calling thread alone, with the same results (chunks are independent).
"""
from __future__ import annotations

import ctypes
import functools
import logging
import os

import numpy as np
import torch

logger = logging.getLogger(__name__)

#: Slots before the arrays in a packed argument array: the chunk counter and the number of chunks.
HEADER = 2


def pack(chunks: int, *items: np.ndarray | int) -> np.ndarray:
    """int64 argument array: [counter 0, chunks, then per item: an array's address and its shape (the
    array must be C-contiguous and stay alive during the call), or an int as is]."""
    out = [0, chunks]
    for a in items:
        if isinstance(a, np.ndarray):
            if not a.flags.c_contiguous:
                raise ValueError(f"items: expected C-contiguous arrays, got strides {a.strides}")
            out.append(a.ctypes.data)
            out.extend(a.shape)
        else:
            out.append(int(a))
    return np.array(out, dtype=np.int64)


@functools.lru_cache(maxsize=1)
def _gomp_parallel():
    """torch's ``GOMP_parallel`` (ctypes; it releases the GIL while the region runs), or None."""
    if torch.__config__.parallel_info().find("ATen parallel backend: OpenMP") < 0:
        return None
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "libgomp" in line and "/" in line}
    except OSError:
        return None
    torch_dir = os.path.dirname(torch.__file__)
    mine = sorted(p for p in paths if p.startswith(torch_dir))
    if not mine and len(paths) != 1:  # the one torch loaded is not known for sure
        return None
    lib = ctypes.CDLL((mine or sorted(paths))[0])  # already loaded: the same handle, the same thread pool
    fn = lib.GOMP_parallel
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint]
    logger.debug("surprise kernels run on torch's OpenMP threads (%s)", (mine or sorted(paths))[0])
    return fn


_SERIAL = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


def run(trampoline, args: np.ndarray, threads: int | None = None) -> None:
    """Run a trampoline over the chunks of packed `args` on up to `threads` (default: torch's count) of
    torch's OpenMP threads; on the calling thread alone when there is one thread or one chunk, or no libgomp."""
    threads = torch.get_num_threads() if threads is None else threads
    threads = min(threads, int(args[1]))
    region = _gomp_parallel() if threads > 1 else None
    if region is None:
        _SERIAL(trampoline.address)(args.ctypes.data)
    else:
        region(trampoline.address, args.ctypes.data, threads, 0)


@functools.lru_cache(maxsize=1)
def blas_address() -> int:
    """Address of torch's Fortran ``sgemm_`` (MKL, exported by libtorch_cpu), or 0 where it is not found."""
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f if line.rstrip().endswith("/libtorch_cpu.so")})
        if not paths or "BLAS_INFO=mkl" not in torch.__config__.show():
            return 0
        return ctypes.cast(ctypes.CDLL(paths[0]).sgemm_, ctypes.c_void_p).value or 0
    except (OSError, AttributeError):
        return 0
