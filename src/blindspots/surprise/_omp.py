"""Run compiled per-chunk kernels on torch's own OpenMP threads (the ones a forward just used).

Why: right after a forward, torch's OpenMP workers spin, waiting for the next parallel region; a
thread of our own (a Python thread, numba's own OpenMP or workqueue pool: numba's omppool loads a
second libgomp with its own pool) shares a core with a spinning worker and runs at about half speed
(measured slower than one thread, see ``fused``). Opening the parallel region in torch's libgomp
(``GOMP_parallel``) hands the work to the spinning workers themselves: measured 1.96x on 2 cores
for a row-sum kernel run right after a torch matmul, no new thread created.

A kernel is a numba ``cfunc(void(voidptr))`` ("trampoline", in ``_fused_kernels``) that reads its
arguments from an int64 array (packed and read back as its ``_signature.KernelSignature`` declares) and
takes chunks by an atomic counter until none are left: each thread of the region runs it, so a
descheduled worker only costs the chunk it holds. Where torch
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

#: Header slots of a packed argument array (the rest is laid out by ``_signature.KernelSignature``): the
#: atomic chunk counter, the number of chunks, the array's slot count, the layout's fingerprint, and the
#: status a trampoline writes when it refuses the layout (0: none). numba-free, so that this module is too.
COUNTER, CHUNKS, SLOTS, FINGERPRINT, STATUS = range(5)
HEADER = 5


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
    """Run a trampoline over the chunks of `args` (int64 [slots], from its signature's ``pack``) on up to
    `threads` (default: torch's count) of torch's OpenMP threads; on the calling thread alone when there
    is one thread or one chunk, or no libgomp. RuntimeError when the trampoline refused the layout."""
    if not (isinstance(args, np.ndarray) and args.dtype == np.int64 and args.ndim == 1 and args.flags.c_contiguous
            and args.size > SLOTS and args[SLOTS] == args.size):
        raise ValueError(f"args: expected a packed int64 argument array (KernelSignature.pack), got "
                         f"{getattr(args, 'dtype', type(args).__name__)} {getattr(args, 'shape', '')}")
    threads = torch.get_num_threads() if threads is None else threads
    threads = min(threads, int(args[CHUNKS]))
    region = _gomp_parallel() if threads > 1 else None
    if region is None:
        _SERIAL(trampoline.address)(args.ctypes.data)
    else:
        region(trampoline.address, args.ctypes.data, threads, 0)
    if args[STATUS] != 0:
        raise RuntimeError(f"{getattr(trampoline, '__name__', 'kernel')}: the compiled kernel expects another argument "
                           f"layout than the one packed ({args[SLOTS]} slots, fingerprint {args[FINGERPRINT]}): "
                           "packed for another kernel")


#: The largest size the Fortran ``sgemm_`` takes: MKL's LP64 interface (torch's) passes sizes as int32.
SGEMM_MAX = 2**31 - 1


def sgemm_fits(*sizes: int) -> bool:
    """Whether every matrix size and leading dimension fits ``sgemm_``'s int32 arguments (``SGEMM_MAX``)."""
    return all(0 <= s <= SGEMM_MAX for s in sizes)


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
